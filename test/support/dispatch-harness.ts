import { systemClock, type Clock } from '../../src/clock.js';
import { configSchema } from '../../src/config/schema.js';
import { createDispatcher, type Dispatcher } from '../../src/dispatch/dispatcher.js';
import { createSinks } from '../../src/dispatch/fanout.js';
import { createOperatorEvents } from '../../src/dispatch/operator-events.js';
import { createPauses, type Pauses } from '../../src/dispatch/pauses.js';
import type { DispatchTuning } from '../../src/dispatch/tuning.js';
import { createLogger } from '../../src/log.js';
import { createSinkRouter } from '../../src/sinks/route.js';
import type { Sink } from '../../src/sinks/sink.js';
import { createFanoutStore, type FanoutStore } from '../../src/store/fanout-store.js';
import { createSinkStates, type SinkStates } from '../../src/store/state/sink-state.js';
import { openStore, type Store } from '../../src/store/store.js';
import { tracingOff } from '../../src/tracing/tracing.js';
import { recordEvent, waitFor } from './fanout.js';

const SECRET = 'whsec_dGVzdC1zZWNyZXQtZm9yLXBhdXNlLWxlYXNl';

/** Wraps the one sink under test (after its attempt is counted as started). */
export type WrapSink = (sink: Sink, index: () => number) => Sink['deliver'];

export interface Harness {
  store: Store;
  dispatcher: Dispatcher;
  pauses: Pauses;
  /** Event ids as their attempts started (reached the sink), in order. */
  started: string[];
  post(boxId: string): Promise<string>;
}

export interface HarnessOptions {
  url: string;
  config: Record<string, unknown>;
  clock?: Clock;
  tuning?: Partial<DispatchTuning>;
  /** Wraps the one sink under test (after its attempt is counted as started). */
  wrap?: WrapSink;
  wrapStore?: (store: FanoutStore) => FanoutStore;
  /** Wraps the sink states the dispatcher and the pauses share. */
  wrapStates?: (states: SinkStates) => SinkStates;
}

/** One dispatcher in this thread on a real store, with the one configured sink (its attempts counted as they start); `cleanups` undo it. */
export async function dispatchHarness(
  cleanups: (() => Promise<unknown>)[],
  { url, config: overrides, clock = systemClock, tuning = {}, wrap, wrapStore = (s) => s, wrapStates = (s) => s }: HarnessOptions,
): Promise<Harness> {
  let dispatcher: Dispatcher | undefined;
  // On PostgreSQL an event is read once numbered, after its commit.
  const store = await openStore({ url, onCommit: () => dispatcher?.wake('log') });
  cleanups.push(() => store.close());
  const logger = createLogger('silent');
  const config = configSchema.parse({ secrets: [SECRET], ...overrides });
  const fanoutStore = createFanoutStore(store.database);
  const { sinks, buses } = createSinks({ config, clock, logger, archive: fanoutStore.archive });
  for (const bus of buses) bus.start();
  cleanups.push(() => Promise.all(sinks.map((sink) => sink.close())));
  const [real] = sinks as [Sink];
  const started: string[] = [];
  const deliver = wrap?.(real, () => started.length) ?? real.deliver;
  const counted: Sink = { ...real, deliver: (event, signal, options) => (started.push(event.id), deliver(event, signal, options)) };

  const sinkStates = wrapStates(createSinkStates(store.database));
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
  });
  const running = createDispatcher({
    store: wrapStore(fanoutStore),
    sinks: [counted],
    clock,
    logger,
    metrics: { sinkDeliveries: { inc() {} }, sinkDeliveryDuration: { observe() {} } },
    source: config.source,
    exclusive,
    sinkStates,
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

