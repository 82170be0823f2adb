import { createHash } from 'node:crypto';
import request from 'supertest';
import { describe, expect, it } from 'vitest';
import type { Wait } from '../src/clock.js';
import type { Run } from '../src/store/state/reconcile-runs.js';
import { ManualClock } from './support/clock.js';
import { engines } from './support/databases.js';
import { adminAuth, fanoutFixture, hook, metricValue, outboxRows } from './support/fanout-relay.js';
import { startFakeSandbox, type FakeSandbox } from './support/fake-sandbox.js';
import { waitFor } from './support/fanout.js';
import type { HookServer } from './support/hook-server.js';
import { gate } from './support/reconcile.js';
import { SHARED_NATS, collect, natsClient, uniqueNames } from './support/nats.js';
import type { TestRelay } from './support/relay.js';
import { eventId } from './support/sign.js';

const MINUTE = 60_000;
const iso = (ms: number) => new Date(ms).toISOString();

/** A history record in the delivery payload's shape. */
function historyRecord(boxId: string, type: string, createdAt: number, extra: { previousState?: string; state?: string; id?: string } = {}) {
  const state = extra.state ?? (type === 'box.error' ? 'error' : type === 'box.archived' ? 'archived' : 'ready');
  const data = type === 'box.hydrated' ? { box: { id: boxId, name: `n-${boxId}` } } : { box: { id: boxId, name: `n-${boxId}` }, previousState: extra.previousState ?? 'cloning', state };
  return { id: extra.id ?? eventId(), type, createdAt: iso(createdAt), data };
}

interface CloudEventBody {
  id: string;
  type: string;
  subject: string;
  time: string;
  data: { state?: string; previousState?: string; box: { id: string; name?: string } };
  boxrelayorigin?: string;
}
/**
 * A wait for a turn under the request rate that moves the clock on to the turn instead of sleeping:
 * a turn due `ms` after now is reached once the clock reads it.
 */
const turnsByClock =
  (clock: ManualClock): Wait =>
  async (ms) => {
    const due = clock.now() + ms;
    await Promise.resolve();
    clock.set(Math.max(clock.now(), due));
  };

const relayed = (server: HookServer): CloudEventBody[] => server.requests.map((r) => JSON.parse(r.body) as CloudEventBody);

describe('reconciliation with the Sandbox Service', () => {
  const { defer, server, relay } = fanoutFixture();

  /**
   * A relay watching since an hour before its clock, with one hook that takes everything, and a fake
   * upstream. With `clock`, the relay and the upstream's request log run on it, and the relay waits
   * for its turns under the request rate by moving it on (`turnsByClock`).
   */
  async function setup(options: { overrides?: Record<string, unknown>; pageSize?: number; clock?: ManualClock } = {}) {
    const { clock } = options;
    const upstream = await startFakeSandbox({ pageSize: options.pageSize, now: clock && (() => clock.now()) });
    defer(() => upstream.close());
    const receiver = await server();
    const t = await relay(
      {
        upstreamBaseUrl: upstream.baseUrl,
        upstreamApiKey: upstream.apiKey,
        reconcileInterval: '0',
        reconcileMaxRps: 1000,
        hooks: [hook('all', receiver.url, { events: ['*'] })],
        ...options.overrides,
      },
      { clock, reconcile: { upstream: { minTimeout: 5, maxTimeout: 20, randomize: false }, wait: clock && turnsByClock(clock) } },
    );
    const watchStart = t.clock.now() - 60 * MINUTE;
    await t.relay.store.database.kysely.updateTable('relay_meta').set({ value: iso(watchStart) }).where('name', '=', 'watch_start').execute();
    return { upstream, receiver, t, watchStart };
  }

  const reconcile = async (t: TestRelay, dryRun = false): Promise<Run> => (await t.relay.reconciler!.start({ dryRun })).finished;
  const storedIds = async (t: TestRelay): Promise<string[]> =>
    (await t.relay.store.database.kysely.selectFrom('deliveries').select('id').orderBy('id').execute()).map((r) => r.id);
  const boxRow = (t: TestRelay, id: string) => t.relay.store.database.kysely.selectFrom('boxes').selectAll().where('id', '=', id).executeTakeFirst();
  const settle = (t: TestRelay) => waitFor(async () => (await outboxRows(t, 'all')).length === 0, 'the hook to have every event');

  it('relays missed history oldest first with boxrelayorigin "history", to hooks and NATS', async () => {
    const names = uniqueNames();
    const nats = await natsClient();
    defer(() => nats.close());
    nats.streams.push(names.stream);
    const { upstream, receiver, t } = await setup({ overrides: { natsUrl: SHARED_NATS, natsSubjectPrefix: names.prefix, natsStream: names.stream } });
    const onNats = collect(nats.nc, `${names.prefix}.>`);
    const now = t.clock.now();
    const ready = historyRecord('bx_1', 'box.ready', now - 30 * MINUTE);
    const error = historyRecord('bx_1', 'box.error', now - 20 * MINUTE, { previousState: 'ready' });
    const hydrated = historyRecord('bx_1', 'box.hydrated', now - 25 * MINUTE);
    upstream.setBox({ id: 'bx_1', name: 'n-bx_1', state: 'error', updatedAt: iso(now - 20 * MINUTE) });
    // Newest first, and the hydration under the record's `event` key: order and shape are the relay's to handle.
    upstream.addHistory('bx_1', error, { event: hydrated, kind: 'delivery' }, ready);

    const run = await reconcile(t);
    expect(run).toMatchObject({ outcome: 'succeeded', boxesListed: 1, boxesRepaired: 1, eventsFromHistory: 3, eventsSynthesized: 0, boxesForgotten: 0, error: null });
    await receiver.received(3);
    expect(relayed(receiver).map((e) => [e.id, e.boxrelayorigin])).toEqual([
      [ready.id, 'history'],
      [hydrated.id, 'history'],
      [error.id, 'history'],
    ]);
    const messages = await onNats.received(3);
    expect(messages.map((m) => m.json<CloudEventBody>().boxrelayorigin)).toEqual(['history', 'history', 'history']);
    expect(await boxRow(t, 'bx_1')).toMatchObject({ state: 'error', previous_state: 'ready', last_event_id: error.id });
    expect(await metricValue(t.registry, 'boxrelay_events_total', { account: 'default', type: 'box.error' })).toBe(1);
    expect(await metricValue(t.registry, 'boxrelay_reconcile_events_total', { origin: 'history' })).toBe(3);
    expect(await metricValue(t.registry, 'boxrelay_reconcile_runs_total', { outcome: 'succeeded' })).toBe(1);
    // Received webhooks carry no origin.
    const webhook = await t.post({ boxId: 'bx_2', type: 'box.ready' });
    await receiver.received(4);
    expect(relayed(receiver)[3]).toMatchObject({ id: webhook.deliveryId });
    expect(relayed(receiver)[3]).not.toHaveProperty('boxrelayorigin');
  });

  it('relays a missed flap (error, then ready) but not the event already held; a late webhook is a duplicate', async () => {
    const { upstream, receiver, t } = await setup();
    const now = t.clock.now();
    const first = await t.post({ boxId: 'bx_f', type: 'box.ready', createdAt: iso(now - 40 * MINUTE) });
    expect(first.status).toBe(200);
    await receiver.received(1);
    const error = historyRecord('bx_f', 'box.error', now - 30 * MINUTE, { previousState: 'ready' });
    const back = historyRecord('bx_f', 'box.ready', now - 10 * MINUTE, { previousState: 'error' });
    const held = { id: first.deliveryId, type: 'box.ready', createdAt: iso(now - 40 * MINUTE), data: { box: { id: 'bx_f' }, previousState: 'cloning', state: 'ready' } };
    upstream.setBox({ id: 'bx_f', name: 'f', state: 'ready', updatedAt: iso(now - 10 * MINUTE) });
    upstream.addHistory('bx_f', held, error, back);

    const run = await reconcile(t);
    expect(run).toMatchObject({ outcome: 'succeeded', eventsFromHistory: 2, eventsSynthesized: 0 });
    await receiver.received(3);
    await settle(t);
    expect(relayed(receiver).map((e) => e.id)).toEqual([first.deliveryId, error.id, back.id]);
    expect(await boxRow(t, 'bx_f')).toMatchObject({ state: 'ready', previous_state: 'error', last_event_id: back.id });

    // The upstream's own delivery of the flap arrives late: already stored, nothing relayed again.
    const late = await t.post({ id: error.id, boxId: 'bx_f', type: 'box.error', previousState: 'ready', createdAt: error.createdAt });
    expect(late.status).toBe(200);
    expect(late.body).toEqual({ ok: true, id: error.id, duplicate: true });
    expect(await outboxRows(t, 'all')).toEqual([]);
    expect(receiver.requests).toHaveLength(3);
  });

  it('synthesizes one event with the contract id when the history explains nothing, and a second run changes nothing', async () => {
    const { upstream, receiver, t } = await setup();
    const now = t.clock.now();
    await t.post({ boxId: 'bx_s', boxName: 'svc', type: 'box.ready', createdAt: iso(now - 50 * MINUTE) });
    await receiver.received(1);
    const updatedAt = '2026-11-21T09:45:00.123Z';
    upstream.setBox({ id: 'bx_s', name: 'svc', state: 'error', updatedAt });
    upstream.setBox({ id: 'bx_new', name: 'fresh', state: 'running', updatedAt: iso(now - 5 * MINUTE) });

    const run = await reconcile(t);
    expect(run).toMatchObject({ outcome: 'succeeded', boxesListed: 2, boxesRepaired: 2, eventsFromHistory: 0, eventsSynthesized: 2 });
    await receiver.received(3);
    const hex = createHash('sha256').update(`bx_s|error|${updatedAt}`).digest('hex').slice(0, 32);
    const synthesized = relayed(receiver).find((e) => e.subject === 'bx_s' && e.type === 'box.error');
    expect(synthesized).toEqual({
      specversion: '1.0',
      id: `evt_${hex}`,
      source: 'sandbox',
      type: 'box.error',
      subject: 'bx_s',
      time: updatedAt,
      datacontenttype: 'application/json',
      data: { box: { id: 'bx_s', name: 'svc' }, previousState: 'ready', state: 'error' },
      boxrelayorigin: 'synthesized',
      boxrelayaccount: 'default',
    });
    // A box the relay never heard of: no previousState.
    expect(relayed(receiver).find((e) => e.subject === 'bx_new')).toMatchObject({
      type: 'box.ready',
      data: { box: { id: 'bx_new', name: 'fresh' }, state: 'running' },
      boxrelayorigin: 'synthesized',
    });
    expect(relayed(receiver).find((e) => e.subject === 'bx_new')?.data).not.toHaveProperty('previousState');
    expect(await metricValue(t.registry, 'boxrelay_reconcile_events_total', { origin: 'synthesized' })).toBe(2);
    await settle(t);

    const before = await storedIds(t);
    const requestsBefore = upstream.requests.length;
    const again = await reconcile(t);
    expect(again).toMatchObject({ outcome: 'succeeded', boxesListed: 2, boxesRepaired: 0, eventsFromHistory: 0, eventsSynthesized: 0, boxesForgotten: 0 });
    expect(await storedIds(t)).toEqual(before);
    // Unchanged boxes cost nothing but the list.
    expect(upstream.requests.slice(requestsBefore).map((r) => r.path)).toEqual(['/v1/boxes']);
    expect(await outboxRows(t, 'all')).toEqual([]);
    expect(receiver.requests).toHaveLength(3);
  });

  it('records boxes from before the watch start without an event, and never takes history outside the retention window', async () => {
    const { upstream, receiver, t } = await setup({ overrides: { retentionDays: 1 } });
    const now = t.clock.now();
    // Watching for two days, with a one-day retention window: a record of 30 hours ago is outside it.
    await t.relay.store.database.kysely.updateTable('relay_meta').set({ value: iso(now - 48 * 60 * MINUTE) }).where('name', '=', 'watch_start').execute();
    upstream.setBox({ id: 'bx_old', name: 'old', state: 'archived', updatedAt: iso(now - 50 * 60 * MINUTE) });
    upstream.addHistory('bx_old', historyRecord('bx_old', 'box.archived', now - 50 * 60 * MINUTE, { previousState: 'ready' }));
    upstream.setBox({ id: 'bx_ret', name: 'ret', state: 'error', updatedAt: iso(now - 30 * 60 * MINUTE) });
    upstream.addHistory('bx_ret', historyRecord('bx_ret', 'box.error', now - 30 * 60 * MINUTE));
    upstream.setBox({ id: 'bx_pre', name: 'pre', state: 'ready', updatedAt: iso(now - 72 * 60 * MINUTE) });

    const run = await reconcile(t);
    expect(run).toMatchObject({ outcome: 'succeeded', boxesListed: 3, boxesRepaired: 3, eventsFromHistory: 0, eventsSynthesized: 0 });
    expect(await storedIds(t)).toEqual([]);
    expect(await boxRow(t, 'bx_pre')).toMatchObject({ state: 'ready', last_event_id: null, state_changed_at: iso(now - 72 * 60 * MINUTE) });
    expect(await boxRow(t, 'bx_ret')).toMatchObject({ state: 'error', last_event_id: null });
    expect(await boxRow(t, 'bx_old')).toMatchObject({ state: 'archived', last_event_id: null });
    expect(receiver.requests).toHaveLength(0);
    expect(await metricValue(t.registry, 'boxrelay_boxes', { state: 'error' })).toBe(1);
  });

  it.each(engines)("records a listed box whose name and state hold U+0000 on $name, with U+FFFD in their place (PostgreSQL's text holds none)", async (engine) => {
    const { upstream, t } = await setup({ overrides: { database: await engine.migratedUrl() } });
    const now = t.clock.now();
    upstream.setBox({ id: 'bx_nul', name: 'n\u0000ul', state: 'pau\u0000sed', updatedAt: iso(now - 90 * MINUTE) });
    expect(await reconcile(t)).toMatchObject({ outcome: 'succeeded', boxesListed: 1, boxesRepaired: 1 });
    expect(await boxRow(t, 'bx_nul')).toMatchObject({ name: 'n\uFFFDul', state: 'pau\uFFFDsed', last_event_id: null });
  });

  it('forgets a box deleted upstream, so its error gauge drops to 0', async () => {
    const { upstream, t } = await setup();
    const now = t.clock.now();
    await t.post({ boxId: 'bx_gone', type: 'box.error', createdAt: iso(now - 30 * MINUTE) });
    await t.post({ boxId: 'bx_kept', type: 'box.error', createdAt: iso(now - 30 * MINUTE) });
    upstream.setBox({ id: 'bx_kept', name: 'k', state: 'error', updatedAt: iso(now - 30 * MINUTE) });
    expect(await metricValue(t.registry, 'boxrelay_boxes', { state: 'error' })).toBe(2);

    const dry = await reconcile(t, true);
    expect(dry).toMatchObject({ outcome: 'dry-run', boxesForgotten: 1, actions: [{ boxId: 'bx_gone', action: 'forget' }] });
    expect(await boxRow(t, 'bx_gone')).toBeDefined();

    const run = await reconcile(t);
    expect(run).toMatchObject({ outcome: 'succeeded', boxesForgotten: 1, boxesRepaired: 0 });
    expect(await boxRow(t, 'bx_gone')).toBeUndefined();
    expect(await boxRow(t, 'bx_kept')).toBeDefined();
    expect(await metricValue(t.registry, 'boxrelay_boxes', { state: 'error' })).toBe(1);
    expect(await metricValue(t.registry, 'boxrelay_reconcile_boxes_forgotten_total', {})).toBe(1);
  });

  it('brings back a box forgotten by hand whose events are all stored, and then leaves it alone', async () => {
    const { upstream, t } = await setup();
    const now = t.clock.now();
    const posted = await t.post({ boxId: 'bx_back', type: 'box.error', createdAt: iso(now - 10 * MINUTE) });
    upstream.setBox({ id: 'bx_back', name: 'back', state: 'error', updatedAt: iso(now - 10 * MINUTE) });
    upstream.addHistory('bx_back', { id: posted.deliveryId, type: 'box.error', createdAt: iso(now - 10 * MINUTE), data: { box: { id: 'bx_back' }, state: 'error' } });
    expect((await request(t.relay.internalApp).delete('/admin/boxes/bx_back').set(adminAuth)).status).toBe(204);

    const run = await reconcile(t);
    expect(run).toMatchObject({ outcome: 'succeeded', boxesRepaired: 1, eventsFromHistory: 0, eventsSynthesized: 0 });
    expect(await boxRow(t, 'bx_back')).toMatchObject({ state: 'error', repaired_up_to: iso(now - 10 * MINUTE) });
    const requests = upstream.requests.length;
    expect(await reconcile(t)).toMatchObject({ boxesRepaired: 0 });
    expect(upstream.requests.slice(requests).map((r) => r.path)).toEqual(['/v1/boxes']);
  });

  it('a dry run changes nothing and lists what a run would do', async () => {
    const { upstream, receiver, t } = await setup();
    const now = t.clock.now();
    const missed = historyRecord('bx_d', 'box.ready', now - 20 * MINUTE);
    upstream.setBox({ id: 'bx_d', name: 'd', state: 'error', updatedAt: iso(now - 10 * MINUTE) });
    upstream.addHistory('bx_d', missed);

    const dry = await reconcile(t, true);
    expect(dry).toMatchObject({ outcome: 'dry-run', boxesRepaired: 1, eventsFromHistory: 0, eventsSynthesized: 0 });
    expect(dry.actions).toEqual([
      { boxId: 'bx_d', action: 'relay-history', eventId: missed.id, type: 'box.ready' },
      { boxId: 'bx_d', action: 'synthesize', eventId: expect.stringMatching(/^evt_[0-9a-f]{32}$/), type: 'box.error', state: 'error' },
    ]);
    expect(await storedIds(t)).toEqual([]);
    expect(await boxRow(t, 'bx_d')).toBeUndefined();
    expect(receiver.requests).toHaveLength(0);
    expect(await metricValue(t.registry, 'boxrelay_reconcile_runs_total', { outcome: 'dry-run' })).toBe(1);
    expect(await metricValue(t.registry, 'boxrelay_reconcile_last_success_timestamp_seconds', {})).toBe(0);

    // The real run then does exactly that.
    const run = await reconcile(t);
    expect(run).toMatchObject({ outcome: 'succeeded', eventsFromHistory: 1, eventsSynthesized: 1 });
    expect(await storedIds(t)).toEqual([missed.id, dry.actions![1]!.eventId].sort());
    expect(await metricValue(t.registry, 'boxrelay_reconcile_last_success_timestamp_seconds', {})).toBe(Date.parse(run.finishedAt!) / 1000);
  });

  it('pages through the box list and histories by cursor, with the assumed parameter names', async () => {
    const { upstream, receiver, t } = await setup({ pageSize: 2 });
    const now = t.clock.now();
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) {
      upstream.setBox({ id: `bx_p${i}`, name: `p${i}`, state: 'ready', updatedAt: iso(now - MINUTE) });
      const record = historyRecord(`bx_p${i}`, 'box.ready', now - 2 * MINUTE);
      ids.push(record.id);
      upstream.addHistory(`bx_p${i}`, historyRecord(`bx_p${i}`, 'box.hydrated', now - 3 * MINUTE), record, historyRecord(`bx_p${i}`, 'box.hydrated', now - 90_000));
    }
    const run = await reconcile(t);
    expect(run).toMatchObject({ outcome: 'succeeded', boxesListed: 5, boxesRepaired: 5, eventsFromHistory: 15 });
    await receiver.received(15);
    const lists = upstream.requests.filter((r) => r.path === '/v1/boxes');
    expect(lists.map((r) => new URLSearchParams(r.query).get('limit'))).toEqual(['200', '200', '200']);
    expect(lists.map((r) => new URLSearchParams(r.query).has('cursor'))).toEqual([false, true, true]);
    expect(upstream.requests.filter((r) => r.path === '/v1/boxes/bx_p0/events')).toHaveLength(2);
  });

  it('POST /admin/reconcile answers 202 with the run, 409 while it runs; GET reports it; the request rate is honoured', async () => {
    const { upstream, t } = await setup({ overrides: { reconcileMaxRps: 20 }, clock: new ManualClock() });
    const now = t.clock.now();
    for (let i = 0; i < 8; i++) upstream.setBox({ id: `bx_r${i}`, name: `r${i}`, state: 'ready', updatedAt: iso(now - MINUTE) });
    const internal = request(t.relay.internalApp);

    // Two at once on one replica: one run starts, the other is refused.
    const both = await Promise.all([internal.post('/admin/reconcile').set(adminAuth).send({}), internal.post('/admin/reconcile').set(adminAuth).send({})]);
    expect(both.map((r) => r.status).sort()).toEqual([202, 409]);
    const started = both.find((r) => r.status === 202)!;
    expect(started.body).toMatchObject({ ok: true, run: { id: expect.stringMatching(/^rec_/), outcome: null, finishedAt: null } });
    const busy = await internal.post('/admin/reconcile').set(adminAuth);
    expect(busy.status).toBe(409);
    expect(busy.body).toMatchObject({ ok: false, code: 'reconcile_in_progress' });
    expect((await internal.get('/admin/reconcile').set(adminAuth)).body).toMatchObject({ ok: true, running: true, last: null });

    const done = await waitFor(async () => {
      const status = await internal.get('/admin/reconcile').set(adminAuth);
      return status.body.running === false ? status.body : undefined;
    }, 'the run to end');
    expect(done.last).toMatchObject({ id: started.body.run.id, outcome: 'succeeded', boxesListed: 8, eventsSynthesized: 8 });
    // 1 list + 8 histories at 20 a second: each a turn of 50 ms after the one before, by the relay's clock.
    expect(upstream.requests.map((r) => r.at - now)).toEqual([0, 50, 100, 150, 200, 250, 300, 350, 400]);

    const wrongBody = await internal.post('/admin/reconcile').set(adminAuth).send({ dryRun: 'yes' });
    expect(wrongBody.status).toBe(400);
    expect(wrongBody.body.code).toBe('invalid_request');
  });

  it('answers a delivery while a run waits on a slow upstream', async () => {
    const { upstream, t } = await setup();
    upstream.setBox({ id: 'bx_slow', name: 's', state: 'ready', updatedAt: iso(t.clock.now() - MINUTE) });
    const list = gate();
    upstream.inject({ kind: 'hold', until: list.until, path: '/v1/boxes' });
    const { finished } = await t.relay.reconciler!.start({ dryRun: false });
    let runEnded = false;
    void finished.then(() => (runEnded = true));
    await waitFor(() => upstream.requests.length === 1, 'the run to ask for the box list');
    const answered = await t.post({ boxId: 'bx_other' });
    expect(answered.status).toBe(200);
    // The receiver answered while the run was still waiting for the upstream, which answers only now.
    expect(runEnded).toBe(false);
    list.open();
    expect((await finished).outcome).toBe('succeeded');
  });

  it('a stop cuts a run short at once, without announcing a failure', async () => {
    const { upstream, t } = await setup();
    // An answer that would take a minute: the stop must not wait for it (the test times out at 30 s).
    upstream.inject({ kind: 'delay', ms: 60_000, path: '/v1/boxes' });
    const { finished } = await t.relay.reconciler!.start({ dryRun: false });
    await waitFor(() => upstream.requests.length === 1, 'the run to ask for the box list');
    await t.relay.reconciler!.stop();
    expect(await finished).toMatchObject({ outcome: 'failed' });
    expect(t.logs.entries().some((e) => e.msg === 'reconciliation stopped by shutdown; the next run takes it up')).toBe(true);
    expect(await t.relay.store.database.kysely.selectFrom('deliveries').select('type').execute()).toEqual([]);
  });

  it('is unavailable (409 reconcile_not_configured) without the upstream settings', async () => {
    const t = await relay({});
    const response = await request(t.relay.internalApp).post('/admin/reconcile').set(adminAuth);
    expect(response.status).toBe(409);
    expect(response.body.code).toBe('reconcile_not_configured');
    expect(t.registry.getSingleMetric('boxrelay_reconcile_last_success_timestamp_seconds')).toBeUndefined();
  });
});

describe('reconciliation refuses bad upstream answers, each clearly and without applying half of it', () => {
  const { defer, server, relay } = fanoutFixture();

  /** The relay and the upstream's request log on one clock, which the relay's waits move on. */
  async function setup() {
    const clock = new ManualClock();
    const upstream = await startFakeSandbox({ now: () => clock.now() });
    defer(() => upstream.close());
    const receiver = await server();
    const t = await relay(
      { upstreamBaseUrl: upstream.baseUrl, upstreamApiKey: upstream.apiKey, reconcileInterval: '0', reconcileMaxRps: 1000, hooks: [hook('all', receiver.url)] },
      { clock, reconcile: { upstream: { minTimeout: 5, maxTimeout: 20, randomize: false }, wait: turnsByClock(clock) } },
    );
    await t.relay.store.database.kysely.updateTable('relay_meta').set({ value: iso(t.clock.now() - 60 * MINUTE) }).where('name', '=', 'watch_start').execute();
    const now = t.clock.now();
    // A box with one good record and a synthesizable state: a half-applied run would store something.
    upstream.setBox({ id: 'bx_a', name: 'a', state: 'error', updatedAt: iso(now - MINUTE) });
    upstream.addHistory('bx_a', historyRecord('bx_a', 'box.ready', now - 5 * MINUTE));
    return { upstream, receiver, t };
  }

  async function expectFailedRun(t: TestRelay, upstream: FakeSandbox, receiver: HookServer, error: RegExp): Promise<Run> {
    const run = await (await t.relay.reconciler!.start({ dryRun: false })).finished;
    expect(run.outcome).toBe('failed');
    expect(run.error).toMatch(error);
    expect(t.logs.entries().some((e) => String(e.msg).startsWith('reconciliation failed') && error.test(String(e.msg)))).toBe(true);
    // Nothing from the upstream was stored: only the operator event that announces the failure.
    const stored = await t.relay.store.database.kysely.selectFrom('deliveries').select(['type', 'payload']).execute();
    expect(stored.map((d) => d.type)).toEqual(['boxrelay.reconcile.failed']);
    expect(JSON.parse(stored[0]!.payload)).toMatchObject({ data: { runId: run.id, error: run.error } });
    expect(await t.relay.store.database.kysely.selectFrom('boxes').select('id').execute()).toEqual([]);
    expect(receiver.requests).toHaveLength(0);
    expect(await metricValue(t.registry, 'boxrelay_reconcile_runs_total', { outcome: 'failed' })).toBe(1);
    expect((await request(t.relay.internalApp).get('/admin/reconcile').set(adminAuth)).body.last).toMatchObject({ id: run.id, outcome: 'failed' });
    void upstream;
    return run;
  }

  const listFaults: [string, Parameters<FakeSandbox['inject']>[0], RegExp][] = [
    ['a body that is not JSON', { kind: 'raw', status: 200, body: '<html>oops</html>', path: '/v1/boxes' }, /GET \/boxes: body is not JSON/],
    ['no boxes array', { kind: 'raw', status: 200, body: '{"ok":true,"items":[]}', contentType: 'application/json', path: '/v1/boxes' }, /unexpected shape at boxes/],
    ['a box without an id', { kind: 'raw', status: 200, body: JSON.stringify({ ok: true, boxes: [{ name: 'x', state: 'ready', updatedAt: '2026-11-21T09:00:00Z' }] }), contentType: 'application/json', path: '/v1/boxes' }, /unexpected shape at boxes\.0\.id/],
    ['an updatedAt that is not ISO 8601', { kind: 'raw', status: 200, body: JSON.stringify({ ok: true, boxes: [{ id: 'bx_a', state: 'ready', updatedAt: 'yesterday' }] }), contentType: 'application/json', path: '/v1/boxes' }, /boxes\.0\.updatedAt/],
    ['a page of more than 200 boxes', { kind: 'raw', status: 200, body: JSON.stringify({ ok: true, boxes: Array.from({ length: 201 }, (_, i) => ({ id: `bx_${i}`, state: 'ready', updatedAt: '2026-11-21T09:00:00Z' })) }), contentType: 'application/json', path: '/v1/boxes' }, /unexpected shape at boxes \(too_big\)/],
    ['a cursor that comes back unchanged', { kind: 'raw', status: 200, body: JSON.stringify({ ok: true, boxes: [], pageInfo: { nextCursor: 'same' } }), contentType: 'application/json', path: '/v1/boxes', times: 3 }, /returned a cursor it had already given/],
    ['a body over 10 MB', { kind: 'raw', status: 200, body: `{"ok":true,"boxes":[],"pad":"${'x'.repeat(10 * 1024 * 1024)}"}`, contentType: 'application/json', path: '/v1/boxes' }, /body over 10485760 bytes/],
    ['401', { kind: 'error', status: 401, code: 'unauthorized', path: '/v1/boxes' }, /refused the API key \(401\)/],
    ['403', { kind: 'error', status: 403, code: 'forbidden', path: '/v1/boxes' }, /refused the API key \(403\)/],
    ['429 with Retry-After over 60 s', { kind: 'error', status: 429, code: 'rate_limited', retryAfter: '120', path: '/v1/boxes' }, /429 rate_limited/],
  ];
  it.each(listFaults)('box list: %s', async (_name, fault, error) => {
    const { upstream, receiver, t } = await setup();
    upstream.inject(fault);
    await expectFailedRun(t, upstream, receiver, error);
  });

  // A bad record costs only itself: the box's good record is still taken, and the run succeeds.
  const skippedRecords: [string, unknown, 'skipped' | RegExp][] = [
    ['a record of a type outside box.*', { id: eventId(), type: 'prompt.output', createdAt: '2026-11-21T09:58:00Z', data: { box: { id: 'bx_a' } } }, 'skipped'],
    ['a record of a boxrelay. type', { id: eventId(), type: 'boxrelay.event.dead_lettered', createdAt: '2026-11-21T09:58:00Z', data: { box: { id: 'bx_a' } } }, 'skipped'],
    ['a createdAt that is not ISO 8601', { id: eventId(), type: 'box.error', createdAt: 'Nov 21 2026', data: { box: { id: 'bx_a' }, state: 'error' } }, 'skipped'],
    ['a record without data', { id: eventId(), type: 'box.error', createdAt: '2026-11-21T09:58:00Z' }, 'skipped'],
    ['a lifecycle record whose id is not evt_', { id: 'xyz_1', type: 'box.error', createdAt: '2026-11-21T09:58:00Z', data: { box: { id: 'bx_a' }, state: 'error' } }, /record 1.*id is not an evt_ id/],
    ['a lifecycle record without a box id', { id: eventId(), type: 'box.error', createdAt: '2026-11-21T09:58:00Z', data: { state: 'error' } }, /record 1.*requires a non-empty string data\.box\.id/],
  ];
  it.each(skippedRecords)('history: %s is skipped and counted; the run succeeds and takes the good record', async (_name, bad, warning) => {
    const { upstream, receiver, t } = await setup();
    upstream.addHistory('bx_a', bad);
    const run = await (await t.relay.reconciler!.start({ dryRun: false })).finished;
    expect(run).toMatchObject({ outcome: 'succeeded', eventsFromHistory: 1, eventsSynthesized: 1, historyRecordsSkipped: 1, error: null });
    await receiver.received(2);
    expect(relayed(receiver).map((e) => e.type)).toEqual(['box.ready', 'box.error']);
    const warnings = t.logs.entries().filter((e) => String(e.msg).startsWith('history record skipped'));
    if (warning === 'skipped') expect(warnings).toEqual([]);
    else expect(warnings.map((e) => `record ${String(e.record)}: ${String(e.msg)}`)).toEqual([expect.stringMatching(warning)]);
    expect(await metricValue(t.registry, 'boxrelay_reconcile_runs_total', { outcome: 'failed' })).toBe(0);
  });

  it('history: a body without an events array', async () => {
    const { upstream, receiver, t } = await setup();
    upstream.inject({ kind: 'raw', status: 200, body: '{"ok":true,"records":[]}', contentType: 'application/json', path: '/v1/boxes/bx_a/events' });
    await expectFailedRun(t, upstream, receiver, /GET \/boxes\/bx_a\/events.*unexpected shape at events/);
  });

  it('a 429 with a short Retry-After and a 503 are waited out and retried', async () => {
    const { upstream, receiver, t } = await setup();
    upstream.inject({ kind: 'error', status: 429, code: 'rate_limited', retryAfter: '1', path: '/v1/boxes' });
    upstream.inject({ kind: 'error', status: 503, path: '/v1/boxes/bx_a/events' });
    const run = await (await t.relay.reconciler!.start({ dryRun: false })).finished;
    expect(run).toMatchObject({ outcome: 'succeeded', eventsFromHistory: 1, eventsSynthesized: 1 });
    const lists = upstream.requests.filter((r) => r.path === '/v1/boxes');
    expect(lists.map((r) => r.outcome)).toEqual([429, 200]);
    // By the relay's clock: the Retry-After's second, less the backoff p-retry sleeps itself (5 ms).
    expect(lists[1]!.at - lists[0]!.at).toBeGreaterThanOrEqual(995);
    await receiver.received(2);
  });
});
