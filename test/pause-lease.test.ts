import { afterEach, describe, expect, it } from 'vitest';
import { systemClock, type Clock } from '../src/clock.js';
import { configSchema } from '../src/config/schema.js';
import { createDispatcher, type Dispatcher } from '../src/dispatch/dispatcher.js';
import { createSinks } from '../src/dispatch/fanout.js';
import { createOperatorEvents } from '../src/dispatch/operator-events.js';
import { createPauses, type Pauses } from '../src/dispatch/pauses.js';
import type { DispatchTuning } from '../src/dispatch/tuning.js';
import { createLogger } from '../src/log.js';
import { createSinkRouter } from '../src/sinks/route.js';
import type { Sink } from '../src/sinks/sink.js';
import { createFanoutStore, type FanoutStore } from '../src/store/fanout-store.js';
import { createSinkStates, type SinkStates } from '../src/store/state/sink-state.js';
import { openStore, type Store } from '../src/store/store.js';
import { tracingOff } from '../src/tracing/tracing.js';
import { ManualClock } from './support/clock.js';
import { engines } from './support/databases.js';
import { recordEvent, waitFor } from './support/fanout.js';
import { hookServer, type HookServer } from './support/hook-server.js';
import { SHARED_NATS, collect, natsClient, uniqueNames } from './support/nats.js';

const SECRET = 'whsec_dGVzdC1zZWNyZXQtZm9yLXBhdXNlLWxlYXNl';

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** A gate a test opens by hand. */
function gate(): { opened: Promise<void>; open(): void } {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => (open = resolve));
  return { opened, open };
}

/** Wraps the one sink under test (after its attempt is counted as started). */
type WrapSink = (sink: Sink, index: () => number) => Sink['deliver'];

/** Holds the sink's first attempt until `release`: `sent` once it reached the sink. */
function holdFirstAttempt(before: () => unknown = () => {}): { sent: Promise<void>; release(): void; wrap: WrapSink } {
  const held = gate();
  const sent = gate();
  return {
    sent: sent.opened,
    release: held.open,
    wrap: (sink, index) => async (event, signal, options) => {
      before();
      if (index() === 1) {
        sent.open();
        await held.opened;
      }
      return sink.deliver(event, signal, options);
    },
  };
}

interface Harness {
  store: Store;
  dispatcher: Dispatcher;
  pauses: Pauses;
  /** Event ids as their attempts started (reached the sink), in order. */
  started: string[];
  post(boxId: string): Promise<string>;
}

interface HarnessOptions {
  url: string;
  config: Record<string, unknown>;
  clock?: Clock;
  tuning?: Partial<DispatchTuning>;
  /** Wraps the one sink under test (after its attempt is counted as started). */
  wrap?: WrapSink;
  wrapStore?: (store: FanoutStore) => FanoutStore;
  wrapStates?: (states: SinkStates) => SinkStates;
}

/** One dispatcher in this thread on a real store, with the configured sink (its attempts counted as they start). */
async function harness({ url, config: overrides, clock = systemClock, tuning = {}, wrap, wrapStore = (s) => s, wrapStates = (s) => s }: HarnessOptions): Promise<Harness> {
  let dispatcher: Dispatcher | undefined;
  // On PostgreSQL an event is read once numbered, after its commit.
  const store = await openStore({ url, onCommit: () => dispatcher?.wake('log') });
  cleanups.push(() => store.close());
  const logger = createLogger('silent');
  const config = configSchema.parse({ secrets: [SECRET], ...overrides });
  const { sinks, buses } = createSinks({ config, clock, logger });
  for (const bus of buses) bus.start();
  cleanups.push(() => Promise.all(sinks.map((sink) => sink.close())));
  const [real] = sinks as [Sink];
  const started: string[] = [];
  const deliver = wrap?.(real, () => started.length) ?? real.deliver;
  const counted: Sink = { ...real, deliver: (event, signal, options) => (started.push(event.id), deliver(event, signal, options)) };

  const fanoutStore = createFanoutStore(store.database);
  const sinkStates = createSinkStates(store.database);
  const sinksFor = createSinkRouter({ buses: [], hooks: config.hooks, source: config.source });
  const operatorEvents = createOperatorEvents({ writer: store.writer, sinksFor, clock, logger });
  const exclusive = store.database.dialect === 'sqlite';
  const pauses = createPauses({
    sinkStates,
    makeDue: fanoutStore.exceptions.makeDue,
    operatorEvents,
    clock,
    logger,
    changed: async (sink) => dispatcher?.sinkStateChanged(sink),
    replicated: !exclusive,
  });
  const running = createDispatcher({
    store: wrapStore(fanoutStore),
    sinks: [counted],
    clock,
    logger,
    metrics: { sinkDeliveries: { inc() {} }, sinkDeliveryDuration: { observe() {} } },
    source: config.source,
    exclusive,
    sinkStates: wrapStates(sinkStates),
    pauses,
    operatorEvents,
    tracing: tracingOff,
    tuning: { pollMs: 60_000, ...tuning },
  });
  if (buses.length > 0) await waitFor(() => real.up(), 'the bus to connect');
  dispatcher = running;
  await running.start();
  cleanups.push(() => running.stop(1000));
  return {
    store,
    dispatcher: running,
    pauses,
    started,
    async post(boxId) {
      const id = await recordEvent(store, { receivedAt: clock.now(), boxId, sinks: [counted.name], secret: SECRET });
      running.wake('log');
      return id;
    },
  };
}

async function hook(answer?: Parameters<typeof hookServer>[0]): Promise<HookServer> {
  const server = await hookServer(answer);
  cleanups.push(() => server.close());
  return server;
}

describe.each(engines)('once a pause is answered no attempt starts, on $name', ({ url }) => {
  it('per-box: the entries waiting behind a box held open wait for the resume, then go in order', async () => {
    const target = await hook();
    const first = holdFirstAttempt();
    const t = await harness({
      url: await url(),
      config: { hooks: [{ name: 'h', url: target.url, ordering: 'per-box', concurrency: 4 }] },
      wrap: first.wrap,
    });
    const ids = [await t.post('bx_a'), await t.post('bx_a'), await t.post('bx_a')];
    await first.sent;

    expect(await t.pauses.pauseByOperator('h')).toBe(true);
    first.release();
    await target.received(1);
    await t.dispatcher.settled();
    expect(t.started).toEqual([ids[0]]);

    expect(await t.pauses.resume('h', 'operator')).toBe(true);
    t.dispatcher.wake('all');
    const requests = await target.received(3);
    expect(requests.map((r) => (JSON.parse(r.body) as { id: string }).id)).toEqual(ids);
  });

  it('maxPerSecond: the attempts waiting for their turn do not start after the answer', async () => {
    const target = await hook();
    const t = await harness({ url: await url(), config: { hooks: [{ name: 'h', url: target.url, maxPerSecond: 1, concurrency: 4 }] } });
    for (const box of ['bx_1', 'bx_2', 'bx_3', 'bx_4']) await t.post(box);
    await target.received(1);
    expect(await t.pauses.pauseByOperator('h')).toBe(true);
    // Every attempt held by the gate has had its turn (one a second) and been looked at.
    await t.dispatcher.settled();
    expect(target.requests).toHaveLength(1);

    expect(await t.pauses.resume('h', 'operator')).toBe(true);
    t.dispatcher.wake('all');
    await target.received(4);
  });

  it('an in-process retry after the answer does not start; the event waits, not failed for good', async () => {
    const target = await hook((_request, index) => (index === 0 ? 503 : 200));
    let pauses!: Pauses;
    const t = await harness({
      url: await url(),
      config: { hooks: [{ name: 'h', url: target.url }] },
      tuning: { quickRetries: 2, quickMinDelayMs: 10 },
      wrap: (sink, index) => async (event, signal, options) => {
        try {
          return await sink.deliver(event, signal, options);
        } catch (error) {
          // Paused (and answered) between the failed attempt and its quick retry.
          if (index() === 1) expect(await pauses.pauseByOperator('h')).toBe(true);
          throw error;
        }
      },
    });
    pauses = t.pauses;
    const id = await t.post('bx_r');
    await target.received(1);
    await waitFor(async () => (await createFanoutStore(t.store.database).exceptions.countBySink('pending')).h === 1, 'the event to wait');
    await t.dispatcher.settled();
    expect(t.started).toEqual([id]);

    expect(await t.pauses.resume('h', 'operator')).toBe(true);
    t.dispatcher.wake('all');
    await target.received(2);
  });

  it('a bus (NATS): no publish after the answer', async () => {
    const names = uniqueNames();
    const client = await natsClient(SHARED_NATS);
    client.streams.push(names.stream);
    cleanups.push(() => client.close());
    const published = collect(client.nc, `${names.prefix}.>`);
    const first = holdFirstAttempt();
    const t = await harness({
      url: await url(),
      config: { natsUrl: SHARED_NATS, natsSubjectPrefix: names.prefix, natsStream: names.stream, natsOrdering: 'per-box' },
      wrap: first.wrap,
    });
    const ids = [await t.post('bx_n'), await t.post('bx_n'), await t.post('bx_n')];
    await first.sent;
    expect(await t.pauses.pauseByOperator('nats')).toBe(true);
    first.release();
    await published.received(1);
    await t.dispatcher.settled();
    expect(t.started).toEqual([ids[0]]);

    expect(await t.pauses.resume('nats', 'operator')).toBe(true);
    t.dispatcher.wake('all');
    await published.received(3);
  });
});

describe.each(engines)('no attempt starts from a lease run out by the holder\'s clock, on $name', ({ url }) => {
  it('an entry waiting behind its box, its partition taken over meanwhile: not sent here', async () => {
    const target = await hook();
    const clock = new ManualClock();
    const first = holdFirstAttempt();
    const t = await harness({
      url: await url(),
      clock,
      config: { hooks: [{ name: 'h', url: target.url, ordering: 'per-box', concurrency: 4 }] },
      wrap: first.wrap,
    });
    const ids = [await t.post('bx_l'), await t.post('bx_l')];
    await first.sent;
    // A stall: the lease runs out by this process's clock, and another holder takes the partition
    // and moves past the box's events.
    clock.advance(10 * 60_000);
    await t.store.database.kysely
      .updateTable('log_cursors')
      .set({ lease_owner: 'another', lease_until: clock.now() + 60 * 60_000, seq: 1_000_000 })
      .where('sink', '=', 'h')
      .execute();
    first.release();
    await target.received(1);
    await t.dispatcher.settled();
    expect(t.started).toEqual([ids[0]]);
  });

  it('a lease run out by the clock alone: renewed before the next attempt starts', async () => {
    const target = await hook();
    const clock = new ManualClock();
    const order: string[] = [];
    const first = holdFirstAttempt(() => order.push('sent'));
    const t = await harness({
      url: await url(),
      clock,
      config: { hooks: [{ name: 'h', url: target.url, ordering: 'per-box', concurrency: 4 }] },
      wrapStore: (store) => ({
        ...store,
        log: {
          ...store.log,
          acquireParts: (request) => (order.push('renewed'), store.log.acquireParts(request)),
        },
      }),
      wrap: first.wrap,
    });
    await t.post('bx_k');
    await t.post('bx_k');
    await first.sent;
    order.length = 0;
    clock.advance(10 * 60_000);
    first.release();
    await target.received(2);
    expect(order).toEqual(['renewed', 'sent']);
  });
});

describe.each(engines)('the bookkeeping after a delivery, on $name', ({ url }) => {
  it('a failing write of a delivered attempt\'s outcome is tried again without sending the event again', async () => {
    const target = await hook();
    let failuresLeft = 2;
    let tries = 0;
    const t = await harness({
      url: await url(),
      config: { hooks: [{ name: 'h', url: target.url }] },
      wrapStates: (states) => ({
        ...states,
        async succeeded(sink, longRunSince) {
          tries++;
          if (failuresLeft-- > 0) throw new Error('the database is away');
          return states.succeeded(sink, longRunSince);
        },
      }),
    });
    // The hook failed before (another replica saw it, and says so): its next delivery ends the run of failures (a write).
    await createSinkStates(t.store.database).failed('h', Date.now());
    t.dispatcher.sinkStateChanged('h');
    await t.post('bx_f');
    await waitFor(() => tries >= 3, 'the write to hold');
    await t.dispatcher.settled();
    expect(target.requests).toHaveLength(1);
    expect((await createSinkStates(t.store.database).read('h')).failing_since).toBeNull();
  });
});
