import { Migrator, sql } from 'kysely';
import request from 'supertest';
import { describe, expect, it } from 'vitest';
import { migrations } from '../migrations/index.js';
import { openDatabase } from '../src/store/engines/database.js';
import { engines } from './support/databases.js';
import { waitFor } from './support/fanout.js';
import { adminAuth, fanoutFixture, hook, pendingCount } from './support/fanout-relay.js';

const { server, relay } = fanoutFixture();

const body = (id: string, box: string) =>
  JSON.stringify({ id, type: 'box.error', createdAt: '2026-11-20T10:00:00.000Z', data: { box: { id: box }, previousState: 'running', state: 'error' } });

/**
 * Migration 012 (the deliveries become the log) on a store that today's outbox left with every kind
 * of work: pending, retrying, dead-lettered, delivered, and a paused sink's. None of it is lost or
 * sent twice, and new deliveries go out through the log.
 */
describe.each(engines)('migration 012 on $name', (engine) => {
  it('keeps pending, retrying, dead-lettered and paused work, then fans new deliveries out from the log', async () => {
    const url = await engine.url();
    const hookServer = await server();
    const pausedServer = await server();
    // Long before the test relay's clock: every row is due.
    const now = 1_000_000;
    const before = openDatabase({ url });
    try {
      const schema = engine.name === 'postgres' ? (await sql<{ s: string }>`SELECT current_schema() AS s`.execute(before.kysely)).rows[0]!.s : undefined;
      const migrator = new Migrator({ db: before.kysely, provider: { getMigrations: async () => migrations }, migrationTableSchema: schema });
      expect((await migrator.migrateTo('011_audit_and_sink_minutes')).error).toBeUndefined();
      // Stored by that release, after migration 009 ran: every sink routed to has a row.
      const storedAt = Date.now();
      for (const [id, box] of [['evt_fresh', 'bx_1'], ['evt_retry', 'bx_2'], ['evt_dead', 'bx_3'], ['evt_done', 'bx_4'], ['evt_held', 'bx_5']]) {
        await sql`INSERT INTO deliveries (id, type, box_id, created_at, received_at, attempt, payload)
          VALUES (${id}, 'box.error', ${box}, '2026-11-20T10:00:00.000Z', ${storedAt}, 1, ${body(id as string, box as string)})`.execute(before.kysely);
      }
      await sql`INSERT INTO outbox (delivery_id, sink, status, attempts, next_attempt_at, last_error, created_at, updated_at, box_id) VALUES
        ('evt_fresh', 'h', 'pending', 0, ${now - 60_000}, NULL, ${now - 60_000}, ${now - 60_000}, 'bx_1'),
        ('evt_retry', 'h', 'pending', 2, ${now - 1000}, 'http_503: hook answered 503', ${now - 60_000}, ${now - 30_000}, 'bx_2'),
        ('evt_dead', 'h', 'dead', 8, ${now - 60_000}, 'http_500: hook answered 500', ${now - 60_000}, ${now - 50_000}, 'bx_3'),
        ('evt_done', 'h', 'delivered', 1, ${now - 60_000}, NULL, ${now - 60_000}, ${now - 59_000}, 'bx_4'),
        ('evt_held', 'p', 'pending', 0, ${now - 60_000}, NULL, ${now - 60_000}, ${now - 60_000}, 'bx_5')`.execute(before.kysely);
      await sql`INSERT INTO sink_state (sink, failing_since, paused_at, paused_by, next_probe_at) VALUES ('p', NULL, ${now - 10_000}, 'operator', NULL)`.execute(
        before.kysely,
      );
    } finally {
      await before.close();
    }

    const t = await relay({ database: url, hooks: [hook('h', hookServer.url), hook('p', pausedServer.url)] });
    const statusOf = async (id: string) => {
      const response = await request(t.relay.internalApp).get(`/admin/events/${id}`).set(adminAuth);
      return Object.fromEntries((response.body.deliveries as { sink: string; status: string }[]).map((d) => [d.sink, d.status]));
    };

    // The pending and the retrying rows go out once each; the dead letter and the delivered event do not.
    await hookServer.received(2);
    expect(hookServer.requests.map((r) => r.headers['webhook-id']).sort()).toEqual(['evt_fresh', 'evt_retry']);
    await waitFor(async () => (await statusOf('evt_retry')).h === 'delivered', 'the retrying row delivered');
    expect(await statusOf('evt_fresh')).toEqual({ h: 'delivered' });
    expect(await statusOf('evt_dead')).toEqual({ h: 'dead_lettered' });
    expect(await statusOf('evt_done')).toEqual({ h: 'delivered' });

    // The paused sink's work waits until it is resumed, then goes out.
    expect(await statusOf('evt_held')).toEqual({ p: 'pending' });
    expect(pausedServer.requests).toHaveLength(0);
    expect(await pendingCount(t, 'p')).toBe(1);

    // A new delivery goes through the log to both hooks; the paused one still holds it.
    const fresh = await t.post({ type: 'box.error', boxId: 'bx_new' });
    await hookServer.received(3);
    await waitFor(async () => (await statusOf(fresh.deliveryId)).h === 'delivered', 'the new delivery delivered');
    expect(await statusOf(fresh.deliveryId)).toEqual({ h: 'delivered', p: 'pending' });
    expect(await pendingCount(t, 'p')).toBe(2);

    expect((await request(t.relay.internalApp).post('/admin/sinks/p/resume').set(adminAuth)).status).toBe(200);
    await pausedServer.received(2);
    expect(pausedServer.requests.map((r) => r.headers['webhook-id']).sort()).toEqual(['evt_held', fresh.deliveryId].sort());
    await waitFor(async () => (await pendingCount(t, 'p')) === 0, 'the paused work delivered');
    expect(await statusOf('evt_held')).toEqual({ p: 'delivered' });
    expect(hookServer.requests).toHaveLength(3);
  });
});
