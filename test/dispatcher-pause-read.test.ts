import { afterEach, expect, it } from 'vitest';
import { systemClock } from '../src/clock.js';
import { configSchema } from '../src/config/schema.js';
import { createDispatcher, type Dispatcher } from '../src/dispatch/dispatcher.js';
import { createSinks } from '../src/dispatch/fanout.js';
import { createOperatorEvents } from '../src/dispatch/operator-events.js';
import { createPauses } from '../src/dispatch/pauses.js';
import { createLogger } from '../src/log.js';
import { createSinkRouter } from '../src/sinks/route.js';
import type { Sink } from '../src/sinks/sink.js';
import { createFanoutStore, type FanoutStore } from '../src/store/fanout-store.js';
import { createSinkStates } from '../src/store/state/sink-state.js';
import { openStore } from '../src/store/store.js';
import { tracingOff } from '../src/tracing/tracing.js';
import { sqliteFile } from './support/databases.js';
import { recordEvent } from './support/fanout.js';
import { hookServer } from './support/hook-server.js';

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/**
 * In the worker thread a lane's read of the log is served later by the main thread, so it can bring
 * events accepted after a pause was answered. Here the read is held until the pause is told, then
 * served: the lane must not send what it brought.
 */
it('a pause told while the lane reads the log: what that read brings waits, and goes out once resumed', async () => {
  const hook = await hookServer();
  cleanups.push(() => hook.close());
  const store = await openStore({ url: sqliteFile() });
  cleanups.push(() => store.close());
  const logger = createLogger('silent');
  const config = configSchema.parse({ secrets: ['whsec_dGVzdC1zZWNyZXQtZm9yLXBhdXNlLXJlYWQ='], hooks: [{ name: 'h', url: hook.url }] });

  const outbox = createFanoutStore(store.database);
  let readHeld: { reached(): void; release: Promise<void>; served(): void } | undefined;
  const heldOutbox: FanoutStore = {
    ...outbox,
    log: {
      ...outbox.log,
      async read(read) {
        const held = readHeld;
        if (!held) return outbox.log.read(read);
        readHeld = undefined;
        held.reached();
        await held.release;
        const page = await outbox.log.read(read);
        held.served();
        return page;
      },
    },
  };
  const sent: string[] = [];
  const [hookSink] = createSinks({ config, clock: systemClock, logger, archive: outbox.archive }).sinks as [Sink];
  const counted: Sink = { ...hookSink, deliver: (event, signal, trace) => (sent.push(event.id), hookSink.deliver(event, signal, trace)) };

  const sinkStates = createSinkStates(store.database);
  const sinksFor = createSinkRouter({ buses: [], hooks: config.hooks, source: config.source });
  const operatorEvents = createOperatorEvents({ writer: store.writer, sinksFor, clock: systemClock, logger });
  let dispatcher: Dispatcher | undefined;
  const pauses = createPauses({ sinkStates, makeDue: outbox.exceptions.makeDue, operatorEvents, clock: systemClock, logger, changed: async (sink) => dispatcher?.sinkStateChanged(sink) });
  const start = async () => {
    dispatcher = createDispatcher({
      store: heldOutbox,
      sinks: [counted],
      clock: systemClock,
      logger,
      metrics: { sinkDeliveries: { inc() {} }, sinkDeliveryDuration: { observe() {} } },
      source: config.source,
      exclusive: true,
      sinkStates,
      pauses,
      operatorEvents,
      tracing: tracingOff,
      tuning: { pollMs: 60_000 },
    });
    await dispatcher.start();
    return dispatcher;
  };
  const stop = () => dispatcher!.stop(5000);
  cleanups.push(stop);
  const post = async (boxId: string) => {
    const id = await recordEvent(store, { receivedAt: Date.now(), boxId, sinks: ['h'] });
    dispatcher!.wake('log');
    return id;
  };

  await start();
  const first = await post('bx_1');
  await hook.received(1);

  let release!: () => void;
  let served!: () => void;
  const readServed = new Promise<void>((resolve) => (served = resolve));
  const reached = new Promise<void>((resolve) => {
    readHeld = { reached: resolve, release: new Promise<void>((r) => (release = r)), served };
  });
  const second = await post('bx_2');
  await reached;
  // Answered while the read is under way: the lane acknowledges the pause without waiting for it.
  expect(await pauses.pauseByOperator('h')).toBe(true);
  // Served after the answer; a turn later what the read brought would have been handed to the sink.
  release();
  await readServed;
  await new Promise((resolve) => setImmediate(resolve));
  await new Promise((resolve) => setImmediate(resolve));
  expect(sent).toEqual([first]);
  await stop();
  expect(sent).toEqual([first]);
  expect((await outbox.exceptions.countBySink('pending')).h).toBe(1);

  expect(await pauses.resume('h', 'operator')).toBe(true);
  await start();
  await hook.received(2);
  expect(sent).toEqual([first, second]);
});
