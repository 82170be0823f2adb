// The fan-out worker thread's entry (BOXRELAY_FANOUT_THREAD=worker): the dispatcher, unchanged,
// with its sinks, tracing and logger; its storage seams are its own connections (to a SQLite file,
// that only read, its writes sent to the storage thread; or a PostgreSQL pool), else calls served by
// the main thread.
import { parentPort, workerData } from 'node:worker_threads';
import { systemClock } from '../clock.js';
import { accountSourcesOf } from '../config/schema.js';
import { createLogger } from '../log.js';
import { createTracing, tracingOff } from '../tracing/tracing.js';
import { createAttemptLog } from '../store/attempts/record-attempts.js';
import { createFanoutStore } from '../store/fanout-store.js';
import { openLinkedDatabase } from '../store/write/storage-thread.js';
import { openDatabase } from '../store/engines/database.js';
import { createAttemptRecorder } from './attempt-recorder.js';
import type { DispatchMetrics } from './dispatcher.js';
import { busChecks, createInlineFanout, createSinks } from './fanout.js';
import { transformErrorReporter } from '../sinks/filter-errors.js';
import { raiseThreadNiceness } from '../threads/thread-priority.js';
import { callerOver } from '../threads/calls.js';
import type { FromWorker, MetricsReport, ServedParts, SinkStatus, ToWorker, WorkerData } from './thread-messages.js';

/** How often recorded metrics and a changed sink status go to the main thread: one message, not one per event. */
const REPORT_MS = 100;

const port = parentPort;
if (!port) throw new Error('fanout-worker.js runs as a worker thread of `boxrelay serve`');
const { config, exclusive, tracing: traced, owner, ownDatabase } = workerData as WorkerData;
const post = (message: FromWorker) => port.postMessage(message);

// Lines go to the main thread's destination: one writer of stdout, so no line is ever split by another's.
const logger = createLogger(config.logLevel, { write: (line: string) => post({ kind: 'log', line }) });
const tracing = traced ? createTracing(process.env) : tracingOff;
if (config.fanoutNiceness > 0) {
  raiseThreadNiceness(config.fanoutNiceness).catch((error: unknown) =>
    logger.info({ err: error }, 'the fan-out thread runs at the process\'s CPU priority: on short cores a backlog drain shares them evenly with the answers to webhooks'),
  );
}
const caller = callerOver<ServedParts>(port);
const recorder = createMetricsRecorder();
const database =
  ownDatabase &&
  (ownDatabase.storage
    ? openLinkedDatabase(ownDatabase.options, ownDatabase.storage)
    : openDatabase({ ...ownDatabase.options, onConnectionError: (error) => logger.warn({ err: error }, 'a database connection of the fan-out failed; the next query reconnects') }));
const store = database ? createFanoutStore(database) : { log: caller.remote('log'), exceptions: caller.remote('exceptions'), archive: caller.remote('archive') };
const { sinks, buses } = createSinks({
  config,
  clock: systemClock,
  logger,
  archive: store.archive,
  onTransformError: transformErrorReporter({ clock: systemClock, logger: logger.child({ part: 'transforms' }), count: (sink) => recorder.transformError(sink) }),
});

const fanout = createInlineFanout({
  store,
  sinkStates: caller.remote('sinkStates'),
  pauses: caller.remote('pauses'),
  operatorEvents: caller.remote('operatorEvents'),
  attempts: createAttemptRecorder({ log: database ? createAttemptLog(database) : caller.remote('attempts'), mode: config.attempts, logger }),
  sinks,
  buses,
  clock: systemClock,
  logger,
  metrics: recorder.metrics,
  source: config.source,
  accountSources: accountSourcesOf(config),
  exclusive,
  tracing,
  tuning: { pollMs: config.outboxPollMs, leaseMs: config.outboxLeaseMs, unservedGraceMs: config.unservedSinkGrace },
  owner,
});

let lastStatus = '';
const report = () => {
  const metrics = recorder.take();
  if (metrics) post({ kind: 'metrics', report: metrics });
  const status: SinkStatus = {
    up: Object.fromEntries(sinks.map((sink) => [sink.name, sink.up()])),
    throttled: Object.fromEntries(sinks.map((sink) => [sink.name, sink.throttled?.() ?? 0])),
    buses: busChecks(buses),
  };
  const text = JSON.stringify(status);
  if (text !== lastStatus) post({ kind: 'status', status });
  lastStatus = text;
};
const reporting = setInterval(report, REPORT_MS);

port.on('message', (message: ToWorker) => {
  switch (message.kind) {
    case 'wake':
      return fanout.wake(message.scope);
    case 'sinkStateChanged':
      return void fanout.sinkStateChanged(message.sink).then(() => post({ kind: 'sinkStateTaken' }));
    case 'whenIdle':
      return void fanout.whenIdle().then(() => post({ kind: 'idle' }));
    case 'stop':
      return void fanout
        .stop(message.graceMs)
        .then(() => tracing.shutdown())
        .then(() => database?.close())
        .then(() => {
          clearInterval(reporting);
          report();
          post({ kind: 'stopped' });
        });
  }
});

await fanout.start();
report();
post({ kind: 'started' });

/** The dispatcher's counters and histogram, recorded here and reported in batches. */
function createMetricsRecorder() {
  let deliveries = new Map<string, MetricsReport['deliveries'][number]>();
  let durations: MetricsReport['durations'] = [];
  let transformErrors = new Map<string, number>();
  const metrics: DispatchMetrics = {
    sinkDeliveries: {
      inc({ sink, outcome }, count = 1) {
        if (count === 0) return;
        const key = `${sink}\n${outcome}`;
        const entry = deliveries.get(key);
        if (entry) entry[2] += count;
        else deliveries.set(key, [sink, outcome, count]);
      },
    },
    sinkDeliveryDuration: {
      observe({ sink }, seconds) {
        durations.push([sink, seconds]);
      },
    },
  };
  return {
    metrics,
    transformError: (sink: string) => transformErrors.set(sink, (transformErrors.get(sink) ?? 0) + 1),
    /** What was recorded since the last call; undefined when nothing was. */
    take(): MetricsReport | undefined {
      if (deliveries.size === 0 && durations.length === 0 && transformErrors.size === 0) return undefined;
      const taken = { deliveries: [...deliveries.values()], durations, transformErrors: [...transformErrors] };
      deliveries = new Map();
      durations = [];
      transformErrors = new Map();
      return taken;
    },
  };
}
