import { sql, type Kysely } from 'kysely';
import pg from 'pg';
import request from 'supertest';
import { describe, expect, it } from 'vitest';
import { UNRECORDED_ROUTING } from '../migrations/020_unrecorded_routing.js';
import { openDatabase } from '../src/store/engines/database.js';
import { createMigrator, openMigrated } from '../src/store/engines/migrate.js';
import { recordPastRouting } from '../src/store/exceptions/past-routing.js';
import { engines, postgresSchema } from './support/databases.js';
import { waitFor } from './support/fanout.js';
import { adminAuth, fanoutFixture, hook, pendingCount } from './support/fanout-relay.js';
import { ManualClock } from './support/clock.js';
import { collect, natsClient, SHARED_NATS, uniqueNames } from './support/nats.js';
import type { TestRelay } from './support/relay.js';

const { server, relay, defer } = fanoutFixture();

const HOUR = 3_600_000;
const DAY = 24 * HOUR;

/** A database as an older release left it: today's migrations up to the last one that release had, then its rows. */
async function olderDatabase(url: string, lastMigration: string, write: (db: Kysely<unknown>) => Promise<void>): Promise<void> {
  const database = openDatabase({ url });
  try {
    expect((await (await createMigrator(database)).migrateTo(lastMigration)).error).toBeUndefined();
    await write(database.kysely as Kysely<unknown>);
  } finally {
    await database.close();
  }
}

const webhook = (id: string, type: string, box: string) =>
  JSON.stringify({ id, type, createdAt: '2026-11-20T10:00:00.000Z', data: { box: { id: box }, previousState: 'running', state: 'error' } });

/** The start's writing of those deliveries' rows is done (it runs once the relay listens). */
const pastRoutingWritten = (t: TestRelay) => t.logs.waitFor((entry) => entry.msg === 'delivered rows written for events stored before statuses were kept (routed by this configuration)');

/** The sinks `GET /admin/events/:id` lists, with their statuses. */
async function statusesOf(t: TestRelay, id: string): Promise<Record<string, string>> {
  const response = await request(t.relay.internalApp).get(`/admin/events/${id}`).set(adminAuth);
  expect(response.status).toBe(200);
  return Object.fromEntries((response.body.deliveries as { sink: string; status: string }[]).map((d) => [d.sink, d.status]));
}

describe.each(engines)('an upgrade keeps every routed sink with its status on $name', (engine) => {
  /**
   * The release of 599cb3d (migration 008): a row per routed sink when an event was stored, deleted
   * once the sink acknowledged it; pending and dead rows kept; "delivered" read off the routing.
   */
  it('from the release that deleted delivered rows: NATS, a per-box hook, a paused hook and a failing one', async () => {
    const url = await engine.url();
    const clock = new ManualClock();
    const stored = clock.now() - HOUR;
    const names = uniqueNames();
    const nats = await natsClient();
    defer(() => nats.close());
    nats.streams.push(names.stream);
    const published = collect(nats.nc, `${names.prefix}.>`);
    const perBox = await server();
    const paused = await server();
    const failing = await server(() => 500);

    const events = [
      // id, type, box, received (ms after `stored`)
      ['evt_all', 'box.error', 'bx_1', 0],
      ['evt_retry', 'box.error', 'bx_2', 1],
      ['evt_nats', 'box.ready', 'bx_3', 2],
      ['evt_held', 'box.error', 'bx_4', 3],
    ] as const;
    const pausedEvent = JSON.stringify({ id: 'evt_op', type: 'boxrelay.sink.paused', createdAt: '2026-11-21T09:00:00.000Z', subject: 'paused', data: { sink: 'paused', by: 'operator' } });
    await olderDatabase(url, '008_deliveries_type_index', async (db) => {
      for (const [id, type, box, at] of events) {
        await sql`INSERT INTO deliveries (id, type, box_id, created_at, received_at, attempt, payload, origin)
          VALUES (${id}, ${type}, ${box}, '2026-11-20T10:00:00.000Z', ${stored + at}, 1, ${webhook(id, type, box)}, NULL)`.execute(db);
      }
      // That release stored its own operator events with no origin (migration 010 marks them).
      await sql`INSERT INTO deliveries (id, type, box_id, created_at, received_at, attempt, payload, origin)
        VALUES ('evt_op', 'boxrelay.sink.paused', NULL, '2026-11-21T09:00:00.000Z', ${stored + 4}, NULL, ${pausedEvent}, NULL)`.execute(db);
      // What was left of the rows: the delivered ones are gone.
      await sql`INSERT INTO outbox (delivery_id, sink, status, attempts, next_attempt_at, last_error, created_at, updated_at, box_id, trace_parent) VALUES
        ('evt_all', 'failing', 'dead', 8, ${stored}, 'http_500: hook answered 500', ${stored}, ${stored + 600_000}, 'bx_1', NULL),
        ('evt_retry', 'failing', 'pending', 3, ${clock.now() + DAY}, 'http_500: hook answered 500', ${stored + 1}, ${stored + 60_000}, 'bx_2', NULL),
        ('evt_nats', 'nats', 'pending', 1, ${stored + 2}, 'nats_timeout: no acknowledgement', ${stored + 2}, ${stored + 30_000}, 'bx_3', NULL),
        ('evt_held', 'paused', 'pending', 0, ${stored + 3}, NULL, ${stored + 3}, ${stored + 3}, 'bx_4', NULL),
        ('evt_held', 'failing', 'dead', 8, ${stored + 3}, 'http_500: hook answered 500', ${stored + 3}, ${stored + 600_000}, 'bx_4', NULL)`.execute(db);
      await sql`INSERT INTO sink_state (sink, failing_since, paused_at, paused_by, next_probe_at) VALUES
        ('paused', NULL, ${stored + 4}, 'operator', NULL),
        ('failing', ${stored}, NULL, NULL, NULL)`.execute(db);
    });

    const t = await relay(
      {
        database: url,
        natsUrl: SHARED_NATS,
        natsSubjectPrefix: names.prefix,
        natsStream: names.stream,
        hooks: [
          hook('perbox', perBox.url, { events: ['box.error'], ordering: 'per-box' }),
          hook('paused', paused.url, { events: ['box.*', 'boxrelay.sink.*'] }),
          hook('failing', failing.url, { events: ['box.error', 'box.ready'] }),
        ],
      },
      { clock },
    );
    await pastRoutingWritten(t);

    // The one pending NATS row goes out once; nothing the old release delivered is sent again.
    await published.received(1);
    await waitFor(async () => (await statusesOf(t, 'evt_nats')).nats === 'delivered', 'the pending NATS row delivered');
    expect(await statusesOf(t, 'evt_all')).toEqual({ failing: 'dead_lettered', nats: 'delivered', perbox: 'delivered', paused: 'delivered' });
    expect(await statusesOf(t, 'evt_retry')).toEqual({ failing: 'pending', nats: 'delivered', perbox: 'delivered', paused: 'delivered' });
    expect(await statusesOf(t, 'evt_nats')).toEqual({ nats: 'delivered', paused: 'delivered', failing: 'delivered' });
    expect(await statusesOf(t, 'evt_held')).toEqual({ paused: 'pending', failing: 'dead_lettered', nats: 'delivered', perbox: 'delivered' });
    // An operator event is never routed to the sink it is about.
    expect(await statusesOf(t, 'evt_op')).toEqual({ nats: 'delivered' });
    // What stands for the attempts and time that were not kept.
    const detail = await request(t.relay.internalApp).get('/admin/events/evt_all').set(adminAuth);
    expect(detail.body.deliveries).toContainEqual({ sink: 'perbox', status: 'delivered', attempts: 1, lastError: null, updatedAt: new Date(stored).toISOString() });
    expect(await pendingCount(t, 'failing')).toBe(1);

    // A new event goes through the log; the paused hook holds it with the old one until it is resumed.
    const fresh = await t.post({ type: 'box.archived', boxId: 'bx_new' });
    await published.received(2);
    expect(published.messages.map((m) => m.headers?.get('Nats-Msg-Id'))).toEqual(['evt_nats', fresh.deliveryId]);
    expect(paused.requests).toHaveLength(0);
    expect((await request(t.relay.internalApp).post('/admin/sinks/paused/resume').set(adminAuth)).status).toBe(200);
    await paused.received(2);
    expect(paused.requests.map((r) => r.headers['webhook-id']).sort()).toEqual(['evt_held', fresh.deliveryId].sort());
    await waitFor(async () => (await statusesOf(t, 'evt_held')).paused === 'delivered', 'the held event delivered');
    expect(perBox.requests).toHaveLength(0);
    expect(failing.requests).toHaveLength(0);
  });

  /** Early builds (migrations up to 003) kept a delivered row as `done`; migration 007 deleted those rows. */
  it('from the builds that kept delivered rows as done', async () => {
    const url = await engine.url();
    const clock = new ManualClock();
    const stored = clock.now() - HOUR;
    const a = await server();
    const b = await server();
    await olderDatabase(url, '003_outbox_lanes', async (db) => {
      for (const [id, at] of [['evt_done', 0], ['evt_half', 1], ['evt_dead', 2]] as const) {
        await sql`INSERT INTO deliveries (id, type, box_id, created_at, received_at, attempt, payload)
          VALUES (${id}, 'box.error', 'bx_1', '2026-11-20T10:00:00.000Z', ${stored + at}, 1, ${webhook(id, 'box.error', 'bx_1')})`.execute(db);
      }
      await sql`INSERT INTO outbox (delivery_id, sink, status, attempts, next_attempt_at, last_error, created_at, updated_at) VALUES
        ('evt_done', 'a', 'done', 1, ${stored}, NULL, ${stored}, ${stored + 10}),
        ('evt_done', 'b', 'done', 2, ${stored}, 'http_503: hook answered 503', ${stored}, ${stored + 20}),
        ('evt_half', 'a', 'done', 1, ${stored + 1}, NULL, ${stored + 1}, ${stored + 11}),
        ('evt_half', 'b', 'pending', 0, ${stored + 1}, NULL, ${stored + 1}, ${stored + 1}),
        ('evt_dead', 'a', 'done', 1, ${stored + 2}, NULL, ${stored + 2}, ${stored + 12}),
        ('evt_dead', 'b', 'dead', 8, ${stored + 2}, 'http_500: hook answered 500', ${stored + 2}, ${stored + 600_000})`.execute(db);
    });

    const t = await relay({ database: url, hooks: [hook('a', a.url), hook('b', b.url)] }, { clock });
    await pastRoutingWritten(t);
    await b.received(1);
    expect(b.requests[0]!.headers['webhook-id']).toBe('evt_half');
    await waitFor(async () => (await statusesOf(t, 'evt_half')).b === 'delivered', 'the pending row delivered');
    expect(await statusesOf(t, 'evt_done')).toEqual({ a: 'delivered', b: 'delivered' });
    expect(await statusesOf(t, 'evt_half')).toEqual({ b: 'delivered', a: 'delivered' });
    expect(await statusesOf(t, 'evt_dead')).toEqual({ b: 'dead_lettered', a: 'delivered' });
    expect(a.requests).toHaveLength(0);
  });

  /** From migration 009 every routed sink kept its row: those events are listed as their rows say. */
  it('leaves the events stored since statuses were kept as their rows say (a hook added later is not listed)', async () => {
    const url = await engine.url();
    const a = await server();
    const late = await server();
    let kept = 0;
    await olderDatabase(url, '008_deliveries_type_index', async (db) => {
      await sql`INSERT INTO deliveries (id, type, box_id, created_at, received_at, attempt, payload, origin)
        VALUES ('evt_old', 'box.error', 'bx_1', '2026-11-20T10:00:00.000Z', ${Date.now() - HOUR}, 1, ${webhook('evt_old', 'box.error', 'bx_1')}, NULL)`.execute(db);
    });
    await olderDatabase(url, '011_audit_and_sink_minutes', async (db) => {
      kept = Date.now();
      await sql`INSERT INTO deliveries (id, type, box_id, created_at, received_at, attempt, payload, origin)
        VALUES ('evt_kept', 'box.error', 'bx_1', '2026-11-20T10:00:00.000Z', ${kept}, 1, ${webhook('evt_kept', 'box.error', 'bx_1')}, NULL)`.execute(db);
      await sql`INSERT INTO outbox (delivery_id, sink, status, attempts, next_attempt_at, last_error, created_at, updated_at, box_id) VALUES
        ('evt_kept', 'a', 'delivered', 1, ${kept}, NULL, ${kept}, ${kept + 5}, 'bx_1')`.execute(db);
    });

    const t = await relay({ database: url, hooks: [hook('a', a.url), hook('late', late.url)] });
    await pastRoutingWritten(t);
    expect(await statusesOf(t, 'evt_kept')).toEqual({ a: 'delivered' });
    // Stored before: routed as the configuration routes it now, as that release listed it.
    expect(await statusesOf(t, 'evt_old')).toMatchObject({ a: 'delivered' });
    expect(await t.relay.store.database.kysely.selectFrom('relay_meta').select('name').where('name', '=', UNRECORDED_ROUTING).execute()).toEqual([]);
  });

  /** Routed as a new event is: a hook's `filter` and `accounts` leave out what they leave out today. */
  it("routes those events as the configuration routes a new one: by type, the hooks' accounts and filters", async () => {
    const url = await engine.url();
    await olderDatabase(url, '008_deliveries_type_index', async (db) => {
      for (const [id, type, box] of [['evt_prod', 'box.error', 'bx_prod'], ['evt_ci', 'box.error', 'bx_ci'], ['evt_ready', 'box.ready', 'bx_prod']] as const) {
        await sql`INSERT INTO deliveries (id, type, box_id, created_at, received_at, attempt, payload, origin)
          VALUES (${id}, ${type}, ${box}, '2026-11-20T10:00:00.000Z', ${Date.now() - HOUR}, 1, ${webhook(id, type, box)}, NULL)`.execute(db);
      }
    });
    const t = await relay({
      database: url,
      accounts: [{ name: 'staging', secrets: ['whsec_c3RhZ2luZy1yZWNlaXZlci1zZWNyZXQtMDEyMzQ='] }],
      hooks: [
        hook('every', (await server()).url),
        hook('prod', (await server()).url, { events: ['box.error'], filter: 'event.data.box.id == "bx_prod"' }),
        hook('staging', (await server()).url, { accounts: ['staging'] }),
      ],
    });
    await pastRoutingWritten(t);
    expect(await statusesOf(t, 'evt_prod')).toEqual({ every: 'delivered', prod: 'delivered' });
    expect(await statusesOf(t, 'evt_ci')).toEqual({ every: 'delivered' });
    expect(await statusesOf(t, 'evt_ready')).toEqual({ every: 'delivered' });
  });

  /**
   * The rows are written a page per transaction with the progress it makes: a start cut short goes
   * on where it stopped, and replicas starting together write each row once.
   */
  it('writes the rows in pages, goes on after a start cut short, and writes each row once when two run together', async () => {
    const url = await engine.url();
    await olderDatabase(url, '008_deliveries_type_index', async (db) => {
      for (let i = 0; i < 7; i++) {
        await sql`INSERT INTO deliveries (id, type, box_id, created_at, received_at, attempt, payload)
          VALUES (${`evt_${i}`}, 'box.error', ${`bx_${i}`}, '2026-11-20T10:00:00.000Z', ${1_000_000 + i}, 1, ${webhook(`evt_${i}`, 'box.error', `bx_${i}`)})`.execute(db);
      }
    });
    const { database } = await openMigrated({ url });
    defer(() => database.close());
    const routed = (type: string) => (type === 'box.error' ? ['a', 'b'] : []);

    // Cut short in the second page: the first page's rows and progress are kept, the second's are not.
    let routings = 0;
    const cut = (type: string) => {
      if (++routings > 3) throw new Error('stopped');
      return routed(type);
    };
    await expect(recordPastRouting(database, cut, { pageSize: 2 })).rejects.toThrow('stopped');
    const rows = () => database.kysely.selectFrom('outbox').select(['delivery_id', 'sink', 'status']).orderBy('delivery_id').orderBy('sink').execute();
    expect(await rows()).toEqual([
      { delivery_id: 'evt_0', sink: 'a', status: 'delivered' },
      { delivery_id: 'evt_0', sink: 'b', status: 'delivered' },
      { delivery_id: 'evt_1', sink: 'a', status: 'delivered' },
      { delivery_id: 'evt_1', sink: 'b', status: 'delivered' },
    ]);

    const written = await Promise.all([recordPastRouting(database, routed, { pageSize: 2 }), recordPastRouting(database, routed, { pageSize: 2 })]);
    expect(written[0]! + written[1]!).toBe(10);
    expect(await rows()).toEqual(
      ['evt_0', 'evt_1', 'evt_2', 'evt_3', 'evt_4', 'evt_5', 'evt_6'].flatMap((id) => ['a', 'b'].map((sink) => ({ delivery_id: id, sink, status: 'delivered' }))),
    );
    expect(await database.kysely.selectFrom('relay_meta').select('name').where('name', '=', UNRECORDED_ROUTING).execute()).toEqual([]);
    expect(await recordPastRouting(database, routed, { pageSize: 2 })).toBe(0);
  });
});

describe('an upgrade with many deliveries of an older release on postgres', () => {
  /** Their rows take a while on a large database: the relay serves meanwhile (held here by a lock on the progress). */
  it('listens and takes events before their rows are written, and writes them all after', async () => {
    const url = await postgresSchema();
    const OLD = 1200;
    await olderDatabase(url, '008_deliveries_type_index', async (db) => {
      const rows = Array.from({ length: OLD }, (_, i) => sql`(${`evt_${i}`}, 'box.error', ${`bx_${i}`}, '2026-11-20T10:00:00.000Z', ${1_000_000 + i}, 1, ${webhook(`evt_${i}`, 'box.error', `bx_${i}`)})`);
      await sql`INSERT INTO deliveries (id, type, box_id, created_at, received_at, attempt, payload) VALUES ${sql.join(rows)}`.execute(db);
    });
    const { database } = await openMigrated({ url });
    await database.close();
    const other = new pg.Client(url);
    await other.connect();
    defer(() => other.end());
    await other.query('BEGIN');
    await other.query(`SELECT value FROM relay_meta WHERE name = $1 FOR UPDATE`, [UNRECORDED_ROUTING]);

    // Statements wait for the lock rather than time out while it is held.
    const t = await relay({ database: url, databaseTimeoutMs: 20_000, hooks: [hook('a', (await server()).url)] });
    expect((await t.post()).status).toBe(200);
    expect((await other.query(`SELECT count(*)::int AS n FROM outbox WHERE status = 'delivered'`)).rows[0].n).toBe(0);

    await other.query('ROLLBACK');
    expect((await pastRoutingWritten(t)).rows).toBe(OLD);
    expect((await other.query(`SELECT count(*)::int AS n FROM outbox WHERE status = 'delivered' AND sink = 'a'`)).rows[0].n).toBe(OLD);
    expect(await statusesOf(t, `evt_${OLD - 1}`)).toEqual({ a: 'delivered' });
  });
});
