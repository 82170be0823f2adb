import { sql } from 'kysely';
import request from 'supertest';
import { describe, expect, it } from 'vitest';
import { ReconcileInProgressError } from '../src/errors.js';
import { ManualClock } from './support/clock.js';
import { engines, postgresSchema } from './support/databases.js';
import { startFakeSandbox } from './support/fake-sandbox.js';
import { adminAuth, allDelivered, fanoutFixture } from './support/fanout-relay.js';
import { waitFor } from './support/fanout.js';
import { fastUpstream, gate, reconcileSettings, setWatchStart } from './support/reconcile.js';
import { eventId } from './support/sign.js';

const MINUTE = 60_000;
const iso = (ms: number) => new Date(ms).toISOString();

describe('the reconcile lease across replicas on PostgreSQL', () => {
  const { defer, server, relay } = fanoutFixture();

  it('holds through an upstream request that hangs longer than the lease, with replica clocks minutes apart: never two runs at once', async () => {
    const upstream = await startFakeSandbox();
    defer(() => upstream.close());
    const receiver = await server();
    const database = await postgresSchema();
    const leaseMs = 600;
    const base = Date.UTC(2026, 10, 21, 10, 0, 0);
    const common = { database, ...reconcileSettings(upstream, receiver.url) };
    const a = await relay(common, { clock: new ManualClock(base), reconcile: { leaseMs, upstream: fastUpstream } });
    // B's clock runs five minutes ahead of A's: by its own clock, every lease A takes has long expired.
    // B sends to no hook: the fan-out's own claims are not this test's subject, only the reconcile lease.
    const b = await relay({ ...common, hooks: [] }, { clock: new ManualClock(base + 5 * MINUTE), reconcile: { leaseMs, upstream: fastUpstream } });
    await setWatchStart(a, base - 60 * MINUTE);
    const events: string[] = [];
    for (let i = 0; i < 3; i++) {
      const boxId = `bx_${i}`;
      const id = eventId();
      events.push(id);
      upstream.setBox({ id: boxId, name: `b${i}`, state: 'error', updatedAt: iso(base - 2 * MINUTE) });
      upstream.addHistory(boxId, { id, type: 'box.error', createdAt: iso(base - 2 * MINUTE), data: { box: { id: boxId }, previousState: 'ready', state: 'error' } });
    }
    const hang = gate();
    upstream.inject({ kind: 'hold', until: hang.until, path: '/v1/boxes' });

    const first = await a.relay.reconciler!.start({ dryRun: false });
    await waitFor(() => upstream.requests.length === 1, 'A to ask for the box list');
    // Wait, by the database's clock, until the lease A took has run out twice over: only renewals keep it.
    const kysely = a.relay.store.database.kysely;
    const dbNow = async () => Number((await sql<{ now: string }>`SELECT floor(extract(epoch from clock_timestamp()) * 1000)::bigint AS now`.execute(kysely)).rows[0]!.now);
    const takenBy = await dbNow();
    await waitFor(async () => (await dbNow()) > takenBy + 2 * leaseMs, 'the first lease period to pass twice');
    const lease = await kysely.selectFrom('leases').selectAll().executeTakeFirstOrThrow();
    expect(Number(lease.expires_at)).toBeGreaterThan(takenBy + leaseMs);

    // B can start nothing while A's request hangs: not by its own call, not through its admin API.
    await expect(b.relay.reconciler!.start({ dryRun: false })).rejects.toBeInstanceOf(ReconcileInProgressError);
    const refused = await request(b.relay.internalApp).post('/admin/reconcile').set(adminAuth);
    expect(refused.status).toBe(409);
    expect(refused.body.code).toBe('reconcile_in_progress');
    expect((await request(b.relay.internalApp).get('/admin/reconcile').set(adminAuth)).body.running).toBe(true);
    expect(upstream.requests).toHaveLength(1);

    hang.open();
    expect(await first.finished).toMatchObject({ outcome: 'succeeded', eventsFromHistory: 3, error: null });
    // Once A is done, B runs: it finds every box repaired.
    expect(await (await b.relay.reconciler!.start({ dryRun: false })).finished).toMatchObject({ outcome: 'succeeded', boxesRepaired: 0, eventsFromHistory: 0 });

    expect(upstream.maxInFlight).toBe(1);
    await allDelivered(a.relay.store, 'all');
    expect(receiver.requests.map((r) => r.headers['webhook-id']).sort()).toEqual([...events].sort());
    expect(await kysely.selectFrom('reconcile_runs').select('outcome').execute()).toEqual([{ outcome: 'succeeded' }, { outcome: 'succeeded' }]);
    expect(await kysely.selectFrom('leases').selectAll().execute()).toEqual([]);
  });
});

for (const engine of engines) {
  describe(`a reconcile run that loses its lease on ${engine.name}`, () => {
    const { defer, server, relay } = fanoutFixture();

    it('stops before its next write, cutting the request under way, and leaves the new holder its lease', async () => {
      const upstream = await startFakeSandbox();
      defer(() => upstream.close());
      const receiver = await server();
      const t = await relay({ database: await engine.migratedUrl(), ...reconcileSettings(upstream, receiver.url) }, { reconcile: { leaseMs: 300, upstream: fastUpstream } });
      const now = t.clock.now();
      await setWatchStart(t, now - 60 * MINUTE);
      upstream.setBox({ id: 'bx_1', name: 'one', state: 'error', updatedAt: iso(now - MINUTE) });
      upstream.addHistory('bx_1', { id: eventId(), type: 'box.error', createdAt: iso(now - MINUTE), data: { box: { id: 'bx_1' }, state: 'error' } });
      const hang = gate();
      defer(async () => hang.open());
      upstream.inject({ kind: 'hold', until: hang.until, path: '/v1/boxes/bx_1/events' });

      const { finished } = await t.relay.reconciler!.start({ dryRun: false });
      await waitFor(() => upstream.requests.some((r) => r.path === '/v1/boxes/bx_1/events'), 'the run to read the history');
      // Another replica holds the lease now (as if this run had stalled past its expiry).
      const kysely = t.relay.store.database.kysely;
      await kysely.updateTable('leases').set({ holder: 'another-replica' }).execute();

      // The renewal finds it lost and cuts the history request that still hangs.
      const run = await finished;
      expect(run).toMatchObject({ outcome: 'failed', eventsFromHistory: 0, eventsSynthesized: 0 });
      expect(run.error).toMatch(/lease could not be renewed/);
      // Nothing was written after the loss: only the announcement of the failure.
      expect(await kysely.selectFrom('deliveries').select(['type', 'origin']).execute()).toEqual([{ type: 'boxrelay.reconcile.failed', origin: 'operator' }]);
      expect(await kysely.selectFrom('boxes').select('id').execute()).toEqual([]);
      expect(await kysely.selectFrom('leases').select('holder').execute()).toEqual([{ holder: 'another-replica' }]);
    });
  });
}
