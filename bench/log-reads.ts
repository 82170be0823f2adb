/**
 * What the fan-out reads of the log: `hooks` hooks on `replicas` dispatchers sharing one PostgreSQL
 * database drain `events` stored deliveries, and every payload the lanes read (log entries and
 * claimed rows) is counted. Each lane reads only its held partitions and its own routing, so the
 * figure should be close to one payload per event and sink.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { systemClock } from '../src/clock.js';
import { configSchema } from '../src/config/schema.js';
import { createDispatcher, leaseOwner } from '../src/dispatch/dispatcher.js';
import { createSinks } from '../src/dispatch/fanout.js';
import { createOperatorEvents } from '../src/dispatch/operator-events.js';
import { createPauses } from '../src/dispatch/pauses.js';
import { parseEvent } from '../src/events/parse-event.js';
import { createLogger } from '../src/log.js';
import { createSinkRouter } from '../src/sinks/route.js';
import { createFanoutStore, type FanoutStore } from '../src/store/fanout-store.js';
import { createSinkStates } from '../src/store/state/sink-state.js';
import { openStore } from '../src/store/store.js';
import { tracingOff } from '../src/tracing/tracing.js';
import { scratchDatabase } from './postgres.js';
import type { Context } from './targets.js';

export interface LogReadSettings {
  events: number;
  hooks: number;
  replicas: number;
  postgresUrl: string;
}

const SECRET = 'whsec_YmVuY2gtbG9nLXJlYWRzLXNlY3JldC0wMTIzNDU2Nzg5';

export async function runLogReads(ctx: Context, settings: LogReadSettings, log: (line: string) => void): Promise<{ lines: string[] }> {
  const { events, hooks, replicas } = settings;
  log(`bench: log reads, ${events.toLocaleString('en')} events to ${hooks} hooks on ${replicas} replicas (PostgreSQL)`);
  let received = 0;
  let done: () => void = () => {};
  const finished = new Promise<void>((resolve) => (done = resolve));
  const receiver = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      res.end();
      if (++received === events * hooks) done();
    });
  });
  await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/`;
  const database = await scratchDatabase(ctx, settings.postgresUrl);
  const config = configSchema.parse({
    secrets: [SECRET],
    hooks: Array.from({ length: hooks }, (_, i) => ({ name: `h${i}`, url, concurrency: 16 })),
  });
  const logger = createLogger('warn');
  const store = await openStore({ url: database.url });
  let payloadBytes = 0;
  let stored = 0;
  try {
    // Stored before the dispatchers start, as an outage leaves them; the sinks' cursors start before them.
    const sinkNames = config.hooks.map((h) => h.name);
    await createFanoutStore(store.database).log.ensureCursors(sinkNames);
    for (let i = 0; i < events; i++) {
      const id = `evt_${i.toString(16).padStart(32, '0')}`;
      const body = JSON.stringify({ id, type: 'box.ready', createdAt: new Date().toISOString(), data: { box: { id: `bx_${i % 500}`, name: 'ci' }, state: 'ready' } });
      stored += body.length;
      await store.writer.record({ event: parseEvent(Buffer.from(body), id), receivedAt: Date.now(), attempt: 1, sinks: sinkNames });
    }
    await store.sequenceLog();
    const counted = ({ log, exceptions, archive }: FanoutStore): FanoutStore => ({
      archive,
      log: {
        ...log,
        async read(read) {
          const page = await log.read(read);
          for (const entry of page.entries) payloadBytes += entry.payload.length;
          return page;
        },
      },
      exceptions: {
        ...exceptions,
        async claim(claim) {
          const rows = await exceptions.claim(claim);
          for (const row of rows) payloadBytes += row.payload?.length ?? 0;
          return rows;
        },
      },
    });
    const sinksFor = createSinkRouter({ buses: [], hooks: config.hooks, source: config.source });
    const started = performance.now();
    const dispatchers = Array.from({ length: replicas }, () => {
      const fanoutStore = createFanoutStore(store.database);
      const sinkStates = createSinkStates(store.database);
      const operatorEvents = createOperatorEvents({ writer: store.writer, sinksFor, clock: systemClock, logger });
      const pauses = createPauses({ sinkStates, makeDue: fanoutStore.exceptions.makeDue, operatorEvents, clock: systemClock, logger, changed: async () => {} });
      return createDispatcher({
        store: counted(fanoutStore),
        sinks: createSinks({ config, clock: systemClock, logger, archive: fanoutStore.archive }).sinks,
        clock: systemClock,
        logger,
        metrics: { sinkDeliveries: { inc() {} }, sinkDeliveryDuration: { observe() {} } },
        source: config.source,
        exclusive: false,
        sinkStates,
        pauses,
        operatorEvents,
        tracing: tracingOff,
        owner: leaseOwner(),
        tuning: { pollMs: 200 },
      });
    });
    await Promise.all(dispatchers.map((d) => d.start()));
    await finished;
    const seconds = (performance.now() - started) / 1000;
    await Promise.all(dispatchers.map((d) => d.stop(5000)));
    const perEventAndSink = payloadBytes / (stored * hooks);
    return {
      lines: [
        `## Log reads: ${hooks} hooks on ${replicas} replicas (PostgreSQL)`,
        '',
        `${events.toLocaleString('en')} stored events drained to every hook in ${seconds.toFixed(1)} s; payload bytes the lanes read ` +
          `per event and sink: ${perEventAndSink.toFixed(2)} payloads (target: close to 1; a lane reading every payload of the log ` +
          `would read ${replicas}).`,
      ],
    };
  } finally {
    await store.close();
    await database.drop();
    receiver.close();
  }
}
