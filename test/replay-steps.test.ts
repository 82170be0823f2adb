import request from 'supertest';
import { afterEach, describe, expect, it } from 'vitest';
import { createOperatorEvents } from '../src/dispatch/operator-events.js';
import { createSinkRouter } from '../src/sinks/route.js';
import { createFanoutStore } from '../src/store/fanout-store.js';
import { queueReplay, REPLAY_STEP } from '../src/store/exceptions/replay.js';
import type { Replay } from '../src/store/exceptions/rows.js';
import { openStore, type Store } from '../src/store/store.js';
import { ManualClock } from './support/clock.js';
import { engines } from './support/databases.js';
import { recordEvent } from './support/fanout.js';
import { ADMIN_TOKEN, adminAuth, allDelivered, fanoutFixture, hook } from './support/fanout-relay.js';
import { captureLogs } from './support/log-capture.js';
import { testRelay, type TestRelay } from './support/relay.js';

const T0 = Date.UTC(2026, 10, 21, 10, 0, 0);
const hookConfig = (name: string, events: string[]) => ({
  name,
  url: 'http://127.0.0.1:1/x',
  events,
  format: 'cloudevents' as const,
  headers: {},
  timeoutMs: 1000,
  maxAttempts: 3,
  concurrency: 1,
  ordering: 'none' as const,
  pauseAfter: 0,
});
// `ops` takes the operator events; NATS takes every event.
const sinksFor = createSinkRouter({
  buses: ['nats'],
  hooks: [hookConfig('alerts', ['box.error']), hookConfig('all', ['box.*']), hookConfig('ops', ['boxrelay.*'])],
  source: 'sandbox',
});
const configured = ['nats', 'alerts', 'all', 'ops'];

describe.each(engines)('replay in steps on $name', (engine) => {
  let store: Store;
  afterEach(async () => store?.close());
  const open = async () => {
    store = await openStore({ url: await engine.migratedUrl() });
    return createFanoutStore(store.database);
  };
  const db = () => store.database.kysely;
  const rowsBySink = async () => {
    const rows = await db().selectFrom('outbox').select(['delivery_id', 'sink']).where('status', '=', 'pending').orderBy('id').execute();
    const bySink: Record<string, string[]> = {};
    for (const row of rows) (bySink[row.sink] ??= []).push(row.delivery_id);
    return bySink;
  };
  const auditCount = async () => Number((await db().selectFrom('audit').select((eb) => eb.fn.countAll().as('n')).executeTakeFirstOrThrow()).n);
  /** An operator event as the relay announces it (its routing less the sink it is about), received at `at`. */
  const announce = async (at: number, sink: string) => {
    const clock = new ManualClock(at);
    await createOperatorEvents({ writer: store.writer, sinksFor, clock, logger: captureLogs().logger }).announce({
      type: 'boxrelay.sink.paused',
      subject: sink,
      about: sink,
      data: { sink, by: 'operator' },
    });
    return (await db().selectFrom('deliveries').select('id').where('received_at', '=', at).executeTakeFirstOrThrow()).id;
  };

  it("queues each event for the sinks it was routed to, still configured, never an operator event's own sink, and only what is not pending", async () => {
    const outbox = await open();
    await recordEvent(store, { receivedAt: T0, type: 'box.error', sinks: ['nats', 'alerts', 'all'] });
    const ready = await recordEvent(store, { receivedAt: T0 + 100, type: 'box.ready', sinks: ['nats', 'all'] });
    // Routed (by a filter, say) to `all` and to a sink configured no more: not to `alerts`, unless a replay names it (its routing takes box.error now).
    const error = await recordEvent(store, { receivedAt: T0 + 200, type: 'box.error', sinks: ['all', 'gone'] });
    // Stored before routing was kept (migration 012): the router's sinks.
    const legacy = await recordEvent(store, { receivedAt: T0 + 300, type: 'box.archived', sinks: [] });
    const aboutOps = await announce(T0 + 400, 'ops');
    const legacyAboutOps = await announce(T0 + 500, 'ops');
    await db().updateTable('deliveries').set({ sinks: null }).where('id', 'in', [legacy, legacyAboutOps]).execute();
    // After the request: not replayed.
    await recordEvent(store, { receivedAt: T0 + 2000, type: 'box.ready', sinks: ['nats', 'all'] });

    const replay: Replay = { since: T0 + 100, now: T0 + 1000, sinksFor, configured };
    expect(await outbox.exceptions.replay({ ...replay, sink: 'ops' })).toBe(0);
    expect(await outbox.exceptions.replay({ ...replay, sink: 'alerts' })).toBe(1);
    expect(await outbox.exceptions.replay(replay)).toBe(7);
    expect(await rowsBySink()).toEqual({ alerts: [error], nats: [ready, legacy, aboutOps, legacyAboutOps], all: [ready, error, legacy] });

    // Again: all of it is still pending, so nothing is added.
    expect(await outbox.exceptions.replay(replay)).toBe(0);
    // Once NATS took its rows, a replay for it queues them again, in accepted order.
    const claimed = await outbox.exceptions.claim({ sink: 'nats', owner: 'me', now: T0 + 1000, leaseMs: 1000, limit: 10 });
    await outbox.exceptions.markDelivered(claimed.map((row) => ({ id: row.id, version: row.version, attempts: 1, lastError: null, now: T0 + 1001 })));
    // Named, NATS also gets the box.error its routing takes now (it was routed elsewhere when accepted).
    expect(await outbox.exceptions.replay({ ...replay, sink: 'nats' })).toBe(5);
    expect((await rowsBySink()).nats).toEqual([ready, error, legacy, aboutOps, legacyAboutOps]);
  });

  it('queues page by page, in accepted order, each event once, with one audit row committed with the first page', async () => {
    await open();
    const ids: string[] = [];
    // Three to a millisecond: pages end between equal times.
    for (let i = 0; i < 25; i++) ids.push(await recordEvent(store, { receivedAt: T0 + Math.floor(i / 3), boxId: `bx_${i % 4}`, sinks: ['all'] }));
    const audit = { at: T0 + 100, action: 'replay' as const, target: null, by: 'cli', detail: {} };
    const replay: Replay = { since: T0, now: T0 + 100, sinksFor, configured };
    expect(await queueReplay(store.database, replay, audit, { rows: 4, bytes: REPLAY_STEP.bytes })).toBe(25);
    expect(await auditCount()).toBe(1);
    const accepted = ids.map((id, i) => ({ id, at: Math.floor(i / 3) })).sort((a, b) => a.at - b.at || (a.id < b.id ? -1 : 1));
    expect((await rowsBySink()).all).toEqual(accepted.map((event) => event.id));
    // Nothing to queue: the audit row all the same (the operator asked).
    expect(await queueReplay(store.database, replay, audit, { rows: 4, bytes: REPLAY_STEP.bytes })).toBe(0);
    expect(await auditCount()).toBe(2);
  });

  it('reads and routes the payloads of a replay for one sink in steps of a bounded size, a turn of the event loop between them', async () => {
    await open();
    for (let i = 0; i < 10; i++) await recordEvent(store, { receivedAt: T0 + i, type: 'box.error', boxId: `bx_${i}`, sinks: ['all'] });
    const payloads = await db().selectFrom('deliveries').select('payload').execute();
    const total = payloads.reduce((sum, { payload }) => sum + Buffer.byteLength(payload), 0);
    const bytes = 3 * Math.max(...payloads.map(({ payload }) => Buffer.byteLength(payload)));
    // Routing in one step is one stretch of the receive thread: count its bytes per turn of the event loop.
    let turn = 0;
    let ticking = true;
    const tick = () => {
      turn++;
      if (ticking) setImmediate(tick);
    };
    setImmediate(tick);
    // Started from a timer callback, as every later step is: started in a check phase, the first step
    // and the second (a timer, which runs before the next check phase) would count as one turn.
    await new Promise((resolve) => setTimeout(resolve, 1));
    const routedPerTurn = new Map<number, number>();
    const counted: Replay['sinksFor'] = (type, event) => {
      routedPerTurn.set(turn, (routedPerTurn.get(turn) ?? 0) + Buffer.byteLength(event?.payload ?? ''));
      return sinksFor(type, event);
    };
    const replay: Replay = { since: T0, now: T0 + 100, sinksFor: counted, configured, sink: 'alerts' };
    try {
      expect(await queueReplay(store.database, replay, undefined, { rows: REPLAY_STEP.rows, bytes })).toBe(10);
    } finally {
      ticking = false;
    }
    expect([...routedPerTurn.values()].reduce((sum, n) => sum + n, 0)).toBe(total);
    expect(Math.max(...routedPerTurn.values())).toBeLessThanOrEqual(bytes);
    expect(routedPerTurn.size).toBeGreaterThanOrEqual(Math.ceil(total / bytes));
    expect((await rowsBySink()).alerts).toHaveLength(10);
  });
});

const STORED = 20_000;

describe.each(engines)('a large replay on $name', (engine) => {
  let t: TestRelay;
  afterEach(() => t?.close());

  it(`answers a webhook while a replay of ${STORED.toLocaleString('en')} events is queued, and queues each stored event once`, async () => {
    t = await testRelay({ database: await engine.migratedUrl(), adminToken: ADMIN_TOKEN, hooks: [{ name: 'all', url: 'http://127.0.0.1:9/a' }] });
    const db = t.relay.store.database.kysely;
    const at = t.clock.now() - 60_000;
    // Stored as accepted deliveries routed to `all`, before the log's start (positions below every cursor: no lane reads them).
    for (let from = 0; from < STORED; from += 1000) {
      await db
        .insertInto('deliveries')
        .values(
          Array.from({ length: 1000 }, (_, k) => {
            const i = from + k;
            const id = `evt_${String(i).padStart(32, '0')}`;
            const createdAt = new Date(at + i).toISOString();
            const payload = JSON.stringify({ id, type: 'box.ready', createdAt, data: { box: { id: `bx_${i % 50}`, name: 'n' }, state: 'ready' } });
            return { id, type: 'box.ready', box_id: `bx_${i % 50}`, created_at: createdAt, received_at: at + Math.floor(i / 4), attempt: 1, payload, origin: null, seq: -1 - i, sinks: 'all', trace_parent: null };
          }),
        )
        .execute();
    }
    const order: string[] = [];
    const replay = request(t.relay.internalApp)
      .post('/admin/replay')
      .set(adminAuth)
      .send({ since: new Date(at).toISOString() })
      .then((answer) => {
        order.push('replay answered');
        return answer;
      });
    // The replay is under way once its audit row (with its first page) is committed.
    while (Number((await db.selectFrom('audit').select((eb) => eb.fn.countAll().as('n')).executeTakeFirstOrThrow()).n) === 0) await new Promise((r) => setImmediate(r));
    t.clock.advance(1000);
    const webhook = await t.post({ boxId: 'bx_new' });
    order.push('webhook answered');
    const replayed = await replay;
    expect(webhook.status).toBe(200);
    expect(order).toEqual(['webhook answered', 'replay answered']);
    expect([replayed.status, replayed.body]).toEqual([202, { ok: true, queued: STORED }]);
    // Each stored event once; the webhook accepted meanwhile is not part of the replay.
    const rows = await db.selectFrom('outbox').select(['delivery_id']).where('sink', '=', 'all').execute();
    expect(rows.length).toBe(STORED);
    expect(new Set(rows.map((row) => row.delivery_id)).size).toBe(STORED);
    expect(rows.some((row) => row.delivery_id === webhook.deliveryId)).toBe(false);
  });
});

describe('replay and operator events', () => {
  const { server, relay } = fanoutFixture();

  for (const engine of engines) {
    it(`never sends a sink the operator events about itself (pause, resume) on ${engine.name}`, async () => {
      const [watched, operators] = [await server(), await server()];
      const t = await relay({
        database: await engine.migratedUrl(),
        hooks: [hook('watched', watched.url, { events: ['box.*', 'boxrelay.*'] }), hook('operators', operators.url, { events: ['boxrelay.*'] })],
      });
      const app = t.relay.internalApp;
      const since = new Date(t.clock.now() - 1000).toISOString();
      const posted = (await t.post({ boxId: 'bx_1' })).deliveryId;
      await watched.received(1);
      expect((await request(app).post('/admin/sinks/watched/pause').set(adminAuth)).status).toBe(200);
      expect((await request(app).post('/admin/sinks/watched/resume').set(adminAuth)).status).toBe(200);
      await operators.received(2);
      await allDelivered(t, 'watched');
      const typesOf = (requests: { body: string }[]) => requests.map((r) => (JSON.parse(r.body) as { type: string }).type);
      expect(typesOf(operators.requests)).toEqual(['boxrelay.sink.paused', 'boxrelay.sink.resumed']);

      const forWatched = await request(app).post('/admin/replay').set(adminAuth).send({ since, sink: 'watched' });
      expect([forWatched.status, forWatched.body]).toEqual([202, { ok: true, queued: 1 }]);
      await watched.received(2);
      await allDelivered(t, 'watched');
      // Every sink: `operators` gets the two again, `watched` its own event only.
      const everyone = await request(app).post('/admin/replay').set(adminAuth).send({ since });
      expect(everyone.body).toEqual({ ok: true, queued: 3 });
      await operators.received(4);
      await watched.received(3);
      await allDelivered(t, 'watched');
      await allDelivered(t, 'operators');
      expect(typesOf(watched.requests)).toEqual(['box.ready', 'box.ready', 'box.ready']);
      expect(watched.requests.map((r) => r.headers['webhook-id'])).toEqual([posted, posted, posted]);
      expect(typesOf(operators.requests).slice(2).sort()).toEqual(['boxrelay.sink.paused', 'boxrelay.sink.resumed']);
    });
  }
});
