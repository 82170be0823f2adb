import request from 'supertest';
import { describe, expect, it } from 'vitest';
import { defaultTuning } from '../src/dispatch/tuning.js';
import { adminAuth, advanceAndWake, allDelivered, fanoutFixture, fastTuning, hook, metricValue, outboxRows, pendingCount, unfinishedIds } from './support/fanout-relay.js';
import { waitFor } from './support/fanout.js';
import type { HookRequest } from './support/hook-server.js';
import { collect, natsClient, ownNats, uniqueNames } from './support/nats.js';
import type { TestRelay } from './support/relay.js';

const MINUTE = 60_000;

interface Relayed {
  id: string;
  type: string;
  subject?: string;
  source: string;
  data: Record<string, unknown>;
}
const body = (r: HookRequest): Relayed => JSON.parse(r.body) as Relayed;

/** Box ids and the events posted for them, in accepted order (each post awaited). */
async function postForBoxes(t: TestRelay, boxes: number, perBox: number): Promise<Map<string, string[]>> {
  const accepted = new Map<string, string[]>();
  for (let i = 0; i < perBox; i++) {
    for (let b = 0; b < boxes; b++) {
      const boxId = `bx_${b}`;
      const posted = await t.post({ boxId, type: i % 2 === 0 ? 'box.error' : 'box.ready' });
      expect(posted.status).toBe(200);
      accepted.set(boxId, [...(accepted.get(boxId) ?? []), posted.deliveryId]);
    }
  }
  return accepted;
}

/** The ids a receiver took (2xx), per box, in arrival order. */
function takenByBox(taken: Relayed[]): Map<string, string[]> {
  const byBox = new Map<string, string[]>();
  for (const event of taken) byBox.set(event.subject!, [...(byBox.get(event.subject!) ?? []), event.id]);
  return byBox;
}

describe('fan-out for production: per-box order, pausing, operator events', () => {
  const { defer, server, relay } = fanoutFixture();
  const sinks = async (t: TestRelay) => (await request(t.relay.internalApp).get('/admin/sinks').set(adminAuth)).body.sinks;

  it('a hook down for an hour: no dead letter, the hook pauses; once back every event arrives once, each box in order', async () => {
    let up = false;
    const taken: Relayed[] = [];
    const target = await server((req) => {
      if (!up) return 503;
      taken.push(body(req));
      return 200;
    });
    const ops = await server();
    const t = await relay(
      { hooks: [hook('down', target.url, { ordering: 'per-box', concurrency: 4 }), hook('ops', ops.url, { events: ['boxrelay.*'] })] },
      // The real retry schedule: waits in the database are minutes to hours, moved through by the clock.
      { dispatch: { ...fastTuning, retryDelayMs: defaultTuning.retryDelayMs } },
    );
    const accepted = await postForBoxes(t, 20, 10);
    // Per-box order: only each box's first event is tried; its quick retries fail too.
    await waitFor(async () => (await outboxRows(t, 'down')).filter((r) => r.attempts === 3).length === 20, 'every box to have failed 3 attempts');
    // Settled, the lane has tried all it would before the next retry is due: none of the later events.
    await t.relay.fanout.whenIdle();
    expect(new Set(target.requests.map((r) => body(r).id)).size).toBe(20);

    // Ten minutes of nothing but failures: the next scheduled attempt pauses the hook.
    advanceAndWake(t, 10 * MINUTE);
    await waitFor(async () => (await sinks(t)).find((s: { name: string }) => s.name === 'down')?.paused, 'the hook to pause');
    const [paused] = await ops.received(1);
    expect(body(paused!)).toMatchObject({ type: 'boxrelay.sink.paused', subject: 'down', source: 'sandbox/boxrelay', data: { sink: 'down', by: 'failures' } });
    expect(await metricValue(t.registry, 'boxrelay_sink_paused', { sink: 'down' })).toBe(1);
    // Settled before the clock jumps past its lease (a jump of minutes with a row still leased sends it again).
    await waitFor(async () => (await outboxRows(t, 'ops')).length === 0, 'the announcement to be settled');

    // The rest of the hour: one probe a minute, each failing; nothing is dead-lettered.
    for (let minute = 11; minute <= 60; minute++) {
      const before = target.requests.length;
      advanceAndWake(t, MINUTE);
      await waitFor(() => target.requests.length === before + 1, `the probe of minute ${minute}`);
    }
    expect((await outboxRows(t, 'down')).filter((r) => r.status === 'dead')).toEqual([]);
    expect((await outboxRows(t, 'down')).every((r) => r.attempts <= 4)).toBe(true);
    expect(await pendingCount(t, 'down')).toBe(200);

    // Back: the next probe succeeds, the hook resumes and its backlog goes out.
    up = true;
    advanceAndWake(t, MINUTE);
    await allDelivered(t, 'down', 30_000);
    expect(taken).toHaveLength(200);
    expect(takenByBox(taken)).toEqual(accepted);
    await ops.received(2);
    expect(ops.requests.map((r) => [body(r).type, body(r).data.by])).toEqual([
      ['boxrelay.sink.paused', 'failures'],
      ['boxrelay.sink.resumed', 'probe'],
    ]);
    expect(await metricValue(t.registry, 'boxrelay_sink_paused', { sink: 'down' })).toBe(0);
    expect(await metricValue(t.registry, 'boxrelay_sink_deliveries_total', { sink: 'down', outcome: 'dead_lettered' })).toBe(0);
  });

  it('per-box order under retries: a failing event holds back only its own box', async () => {
    const failuresLeft = new Map<string, number>();
    const taken: Relayed[] = [];
    const target = await server((req) => {
      const event = body(req);
      const left = failuresLeft.get(event.id) ?? 0;
      if (left > 0) {
        failuresLeft.set(event.id, left - 1);
        return 500;
      }
      taken.push(event);
      return 200;
    });
    const t = await relay(
      { hooks: [hook('ordered', target.url, { ordering: 'per-box', concurrency: 4 })] },
      { dispatch: { ...fastTuning, quickRetries: 0, retryDelayMs: () => MINUTE } },
    );
    const a1 = await t.post({ boxId: 'bx_a', type: 'box.error' });
    failuresLeft.set(a1.deliveryId, 2);
    // The first failure of a1 may come before a2 is accepted: order is by acceptance either way.
    const a2 = await t.post({ boxId: 'bx_a', type: 'box.ready' });
    const b1 = await t.post({ boxId: 'bx_b', type: 'box.error' });
    const a3 = await t.post({ boxId: 'bx_a', type: 'box.archived' });
    const b2 = await t.post({ boxId: 'bx_b', type: 'box.ready' });

    await waitFor(() => taken.length === 2, "box B's events");
    expect(taken.map((e) => e.id)).toEqual([b1.deliveryId, b2.deliveryId]);
    await waitFor(async () => (await outboxRows(t, 'ordered')).find((r) => r.delivery_id === a1.deliveryId)?.attempts === 1, 'a1 to fail once');
    // a2 and a3 were never tried while a1 waits for its retry.
    expect(target.requests.map((r) => body(r).id).filter((id) => id !== a1.deliveryId && id.length > 0)).toEqual([b1.deliveryId, b2.deliveryId]);

    // Retry waits are jittered (x0.8..1.2): two minutes cover one.
    advanceAndWake(t, 2 * MINUTE);
    await waitFor(async () => (await outboxRows(t, 'ordered')).find((r) => r.delivery_id === a1.deliveryId)?.attempts === 2, 'a1 to fail again');
    advanceAndWake(t, 2 * MINUTE);
    await waitFor(() => taken.length === 5, "box A's events");
    expect(taken.map((e) => e.id)).toEqual([b1.deliveryId, b2.deliveryId, a1.deliveryId, a2.deliveryId, a3.deliveryId]);
  });

  it('pause and resume by hand: the work waits, the metric and the operator events follow', async () => {
    const target = await server();
    const ops = await server();
    const names = uniqueNames();
    const nats = await ownNats();
    defer(() => nats.kill());
    const client = await natsClient(nats.url);
    defer(() => client.close());
    const announced = collect(client.nc, `${names.prefix}.boxrelay.>`);
    const t = await relay({
      natsUrl: nats.url,
      natsSubjectPrefix: names.prefix,
      natsStream: names.stream,
      hooks: [hook('main', target.url), hook('ops', ops.url, { events: ['boxrelay.sink.*'] })],
    });
    const internal = request(t.relay.internalApp);

    const paused = await internal.post('/admin/sinks/main/pause').set(adminAuth);
    expect(paused.status).toBe(200);
    expect(paused.body).toEqual({ ok: true, sink: { name: 'main', kind: 'hook', up: true, paused: true, pending: 0, throttled: false, deadLetters: 0 } });
    expect(await metricValue(t.registry, 'boxrelay_sink_paused', { sink: 'main' })).toBe(1);
    const [pausedEvent] = await ops.received(1);
    expect(body(pausedEvent!)).toMatchObject({ type: 'boxrelay.sink.paused', subject: 'main', data: { sink: 'main', by: 'operator' } });
    const [onNats] = await announced.received(1);
    expect(onNats!.subject).toBe(`${names.prefix}.boxrelay.sink.paused.main`);

    const held = await t.post({ boxId: 'bx_p' });
    await waitFor(async () => (await sinks(t)).find((s: { name: string }) => s.name === 'main')?.pending === 1, 'the event to wait');
    // Time passes, the hook is healthy, but nothing is sent while paused by hand (no probes). Once
    // every lane has served the wakes of the commit and of the clock, anything the paused lane had
    // taken would have been answered by the hook: it took nothing.
    advanceAndWake(t, 5 * MINUTE);
    await allDelivered(t, 'nats');
    await t.relay.fanout.whenIdle();
    expect(target.requests).toHaveLength(0);
    expect([...(await unfinishedIds(t, 'main'))]).toEqual([held.deliveryId]);

    const resumed = await internal.post('/admin/sinks/main/resume').set(adminAuth);
    expect(resumed.body.sink).toMatchObject({ name: 'main', paused: false });
    const [sent] = await target.received(1);
    expect(body(sent!).id).toBe(held.deliveryId);
    await ops.received(2);
    expect(body(ops.requests[1]!)).toMatchObject({ type: 'boxrelay.sink.resumed', subject: 'main', data: { by: 'operator' } });
    expect(await metricValue(t.registry, 'boxrelay_sink_paused', { sink: 'main' })).toBe(0);

    // Unknown sink and wrong method.
    const unknown = await internal.post('/admin/sinks/nope/pause').set(adminAuth);
    expect(unknown.status).toBe(404);
    expect(unknown.body.code).toBe('not_found');
    expect((await internal.get('/admin/sinks/main/pause').set(adminAuth)).status).toBe(405);
  });

  it('a hook subscribed to boxrelay.* hears of the dead letters of another hook, never of its own', async () => {
    const bad = await server(() => 400);
    const ops = await server((req) => (body(req).type === 'box.error' ? 400 : 200));
    const t = await relay({ hooks: [hook('bad', bad.url, { events: ['box.ready'] }), hook('ops', ops.url, { events: ['box.error', 'boxrelay.*'] })] });

    const ready = await t.post({ boxId: 'bx_d', type: 'box.ready' });
    const error = await t.post({ boxId: 'bx_e', type: 'box.error' });
    await waitFor(async () => (await outboxRows(t, 'ops')).filter((r) => r.status === 'dead').length === 1, "ops's own dead letter");
    await waitFor(async () => (await outboxRows(t, 'bad')).filter((r) => r.status === 'dead').length === 1, "bad's dead letter");
    await waitFor(() => ops.requests.some((r) => body(r).type === 'boxrelay.event.dead_lettered'), 'the announcement');
    await waitFor(async () => (await outboxRows(t, 'ops')).filter((r) => r.status === 'pending').length === 0, 'ops to have nothing pending');
    // Both dead letters announced and every lane's wakes served: an announcement routed to ops would have reached it.
    await t.relay.fanout.whenIdle();

    const announcements = ops.requests.map(body).filter((e) => e.type.startsWith('boxrelay.'));
    expect(announcements).toHaveLength(1);
    expect(announcements[0]).toMatchObject({
      type: 'boxrelay.event.dead_lettered',
      source: 'sandbox/boxrelay',
      subject: 'bx_d',
      data: { eventId: ready.deliveryId, sink: 'bad', attempts: 1, lastError: 'http_400: hook answered 400' },
    });
    // The announcement about ops itself was stored, for NATS and other hooks, but not sent to ops.
    const stored = await t.relay.store.database.kysely.selectFrom('deliveries').select('payload').where('type', '=', 'boxrelay.event.dead_lettered').execute();
    expect(stored.map((s) => JSON.parse(s.payload).data.eventId).sort()).toEqual([ready.deliveryId, error.deliveryId].sort());
    // A hook with the catch-all `*` is not signed up for operator events.
    expect(bad.requests.map(body).every((e) => !e.type.startsWith('boxrelay.'))).toBe(true);
  });

  it('NATS per-box: the stream holds each box its events in accepted order, through a NATS outage', async () => {
    const names = uniqueNames();
    const nats = await ownNats();
    defer(() => nats.kill());
    const t = await relay(
      { natsUrl: nats.url, natsSubjectPrefix: names.prefix, natsStream: names.stream, natsOrdering: 'per-box' },
      { buses: { ackTimeoutMs: 500, backoff: { minMs: 20, maxMs: 200 } } },
    );
    const natsUp = () => waitFor(async () => (await request(t.relay.internalApp).get('/readyz')).body.checks?.nats === 'ok', 'NATS to be up');
    await natsUp();
    const first = await postForBoxes(t, 5, 4);
    await nats.kill();
    const second = await postForBoxes(t, 5, 4);
    await nats.start();
    await natsUp();
    await allDelivered(t, 'nats', 30_000);

    const client = await natsClient(nats.url);
    defer(() => client.close());
    const { state } = await client.jsm.streams.info(names.stream);
    const stored: Relayed[] = [];
    for (let seq = state.first_seq; seq <= state.last_seq; seq++) stored.push((await client.jsm.streams.getMessage(names.stream, { seq }))!.json<Relayed>());
    const accepted = new Map([...first].map(([box, ids]) => [box, [...ids, ...second.get(box)!]]));
    // Each box once and in order (a re-send after the outage is dropped by the stream's duplicate window).
    expect(takenByBox(stored)).toEqual(accepted);
  });
});
