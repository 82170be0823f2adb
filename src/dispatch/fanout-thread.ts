import { once } from 'node:events';
import { Worker } from 'node:worker_threads';
import type { Config } from '../config/schema.js';
import type { DependencyStatus } from '../dependency-status.js';
import { destinationOf, type Logger } from '../log.js';
import { busNames } from '../sinks/buses.js';
import { WORKER_YOUNG_GENERATION_MB } from '../thread-heap.js';
import { leaseOwner, type DispatchMetrics, type WakeScope } from './dispatcher.js';
import type { DatabaseOptions } from '../store/engines/database.js';
import type { StorageLink } from '../store/write/storage-thread.js';
import type { Fanout } from './fanout.js';
import { serveParts } from '../threads/calls.js';
import type { FromWorker, MetricsReport, ServedParts, SinkStatus, ToWorker, WorkerData } from './thread-messages.js';

export interface FanoutThreadDeps {
  config: Config;
  /** Only this process serves the database (SQLite). */
  exclusive: boolean;
  /** Whether the worker traces (from the same OTEL_* variables as this thread). */
  tracing: boolean;
  /** Served to the worker on this thread's database connection. */
  parts: ServedParts;
  /**
   * The worker's own connections for the log, exceptions and attempts. A SQLite file with its storage
   * thread: a connection that only reads, its writes sent to the storage thread over a link of its
   * own (`link`, a new one for each worker started). PostgreSQL: a pool of its own.
   */
  ownDatabase?: { options: DatabaseOptions; link?(): StorageLink };
  /** This thread's registry's counters, which the worker's reports add to. */
  metrics: DispatchMetrics;
  /** Adds the worker's count of transform errors to this thread's `boxrelay_transform_errors_total`. */
  countTransformErrors?: (sink: string, count: number) => void;
  sinkNames: string[];
  logger: Logger;
}

/** Restarts after a crash wait from the shortest, doubling up to the longest while the worker keeps crashing. */
const RESTART_MS = { min: 1000, max: 30_000 };

/** A worker that lived this long before it crashed is restarted after the shortest wait again. */
const HEALTHY_RUN_MS = 60_000;

/**
 * How long past the grace a stopping worker may take to close its sinks (a bus's drain waits up to
 * its 5 s ack timeout) before it is terminated: a hung worker must not hold the process past its budget.
 */
const STOP_MARGIN_MS = 5000;

const NOT_RUNNING: DependencyStatus = { state: 'down', error: 'the fan-out worker is not running' };

/**
 * The fan-out in a worker thread, so the receive thread only receives. The worker's calls of the
 * pauses, sink states and operator events run here; the log, exceptions and attempts go through its
 * own connections (on a SQLite file, writes by its link to the storage thread; else here too). Its
 * metrics and sink status come in batches. A worker that crashes is restarted; the rows
 * it held are released as soon as the calls it had under way here have ended.
 */
export function createFanoutThread(deps: FanoutThreadDeps): Fanout {
  const log = deps.logger.child({ part: 'fanout-thread' });
  /** The destination of this thread's log: the worker's lines are written there, by one writer. */
  const logLines = destinationOf(deps.logger);
  const buses = busNames(deps.config);
  let status: SinkStatus = { up: {}, throttled: {}, buses: {} };
  let worker: Worker | undefined;
  let stopping = false;
  let crashes = 0;
  let restartTimer: NodeJS.Timeout | undefined;
  let wakeQueued = false;
  let wakeScope: WakeScope = 'log';
  /** Callers of `whenIdle`, answered in the order asked (the worker answers in order); all at once when it exits. */
  const idling: (() => void)[] = [];
  /** Sink state changes posted to the worker and not yet confirmed, oldest first. */
  const telling: (() => void)[] = [];
  /** The last exited worker's rows being given back; the store stays open until that is done. */
  let handedBack: Promise<void> = Promise.resolve();

  const post = (message: ToWorker) => worker?.postMessage(message);

  const applyMetrics = ({ deliveries, durations, transformErrors }: MetricsReport) => {
    for (const [sink, outcome, count] of deliveries) deps.metrics.sinkDeliveries.inc({ sink, outcome }, count);
    for (const [sink, seconds] of durations) deps.metrics.sinkDeliveryDuration.observe({ sink }, seconds);
    for (const [sink, count] of transformErrors) deps.countTransformErrors?.(sink, count);
  };

  /** Starts a worker; resolves once its dispatcher has started. */
  const spawn = (): Promise<void> =>
    new Promise((resolve, reject) => {
      const owner = leaseOwner();
      const link = deps.ownDatabase?.link?.();
      const thread = new Worker(new URL('./fanout-worker.js', import.meta.url), {
        resourceLimits: { maxOldGenerationSizeMb: deps.config.fanoutHeapMb, maxYoungGenerationSizeMb: WORKER_YOUNG_GENERATION_MB },
        // The OS thread's name too: `top -H` (and the bench) tell the fan-out's CPU from the receiver's.
        name: 'fanout',
        workerData: {
          config: withoutReceiverSecrets(deps.config),
          exclusive: deps.exclusive,
          tracing: deps.tracing,
          owner,
          ...(deps.ownDatabase ? { ownDatabase: { options: deps.ownDatabase.options, ...(link ? { storage: link.port } : {}) } } : {}),
        } satisfies WorkerData,
        transferList: link ? [link.port] : [],
      });
      worker = thread;
      const spawnedAt = performance.now();
      let started = false;
      let failure: Error | undefined;
      // Answered to the worker that asked, even if it has been replaced meanwhile.
      const served = serveParts(thread, deps.parts);
      /** Rows a worker that exited without stopping (a crash, or terminated at stop) still holds. */
      const handBack = async () => {
        // A claim still under way (here, or in the storage thread) when it died would lease rows after their release.
        // One on its own PostgreSQL connection may still commit after it: those rows wait for their lease to end.
        await Promise.all([served.answered(), link?.drained()]);
        const rows = await deps.parts.exceptions.releaseAll(owner);
        if (rows > 0) log.info({ rows }, 'released the rows the fan-out worker held');
      };
      thread.on('message', (message: FromWorker) => {
        switch (message.kind) {
          case 'metrics':
            return applyMetrics(message.report);
          case 'status':
            return void (status = message.status);
          case 'log':
            return void logLines.write(message.line);
          case 'started':
            started = true;
            return resolve();
          case 'idle':
            return idling.shift()?.();
          case 'sinkStateTaken':
            return telling.shift()?.();
          case 'stopped':
            return void thread.terminate();
        }
      });
      thread.on('error', (error) => {
        failure = error;
        log.error({ err: error }, 'the fan-out worker failed');
      });
      thread.on('exit', (code) => {
        if (worker === thread) worker = undefined;
        // Nothing is under way in a worker that is gone.
        for (const answer of [...idling.splice(0), ...telling.splice(0)]) answer();
        status = { up: {}, throttled: {}, buses: {} };
        // Messages posted before the exit have all been received: what `served` answers is complete.
        handedBack = handBack().catch((error: unknown) => log.error({ err: error }, 'could not release the rows of the fan-out worker; they wait for their leases to end'));
        if (!started) reject(failure ?? new Error(`the fan-out worker exited (code ${code}) before it started`));
        if (stopping) return;
        crashes = performance.now() - spawnedAt >= HEALTHY_RUN_MS ? 1 : crashes + 1;
        const delayMs = Math.min(RESTART_MS.max, RESTART_MS.min * 2 ** (crashes - 1));
        log.error({ code, restartInMs: delayMs }, 'the fan-out worker stopped; restarting it');
        // A restart that fails is logged above and scheduled again by its own exit.
        restartTimer = setTimeout(() => spawn().catch(() => {}), delayMs).unref();
      });
    });

  return {
    sinks: deps.sinkNames.map((name) => ({ name, up: () => status.up[name] ?? false, throttled: () => status.throttled[name] ?? 0 })),
    dependencies: () => Object.fromEntries(buses.map((name) => [name, status.buses[name] ?? NOT_RUNNING])),
    start: async () => {
      try {
        await spawn();
      } catch (error) {
        // A worker that cannot start is a fault of the whole relay at start, not one to retry.
        stopping = true;
        clearTimeout(restartTimer);
        throw error;
      }
    },
    /** One message per turn, however many commits the turn had (of the widest scope asked for). */
    wake(scope = 'all') {
      if (scope === 'all') wakeScope = 'all';
      if (wakeQueued || !worker) return;
      wakeQueued = true;
      setImmediate(() => {
        wakeQueued = false;
        post({ kind: 'wake', scope: wakeScope });
        wakeScope = 'log';
      });
    },
    sinkStateChanged: (sink) =>
      new Promise<void>((resolve) => {
        // A worker yet to start (or restart) reads the state afresh.
        if (!worker) return resolve();
        telling.push(resolve);
        post({ kind: 'sinkStateChanged', sink });
      }),
    whenIdle: () =>
      new Promise<void>((resolve) => {
        if (!worker) return resolve();
        idling.push(resolve);
        // After a wake queued this turn, which is posted in the next.
        setImmediate(() => post({ kind: 'whenIdle' }));
      }),
    async stop(graceMs) {
      stopping = true;
      clearTimeout(restartTimer);
      const thread = worker;
      // Crashed, its restart not due yet: its rows may still be being given back.
      if (!thread) return handedBack;
      const exited = once(thread, 'exit');
      thread.postMessage({ kind: 'stop', graceMs } satisfies ToWorker);
      const overdue = setTimeout(() => {
        log.error(
          { waitedMs: graceMs + STOP_MARGIN_MS },
          'the fan-out worker did not stop within the shutdown budget; terminating it and releasing its rows',
        );
        void thread.terminate();
      }, graceMs + STOP_MARGIN_MS);
      await exited;
      clearTimeout(overdue);
      await handedBack;
    },
  };
}

/** The worker sends, it never verifies or administers: the signing secrets and keys stay on this thread. */
function withoutReceiverSecrets(config: Config): Config {
  return { ...config, secrets: [], adminToken: undefined, upstreamApiKey: undefined, secretsEncryptionKey: undefined };
}
