import { once } from 'node:events';
import { Worker } from 'node:worker_threads';
import type { Config } from '../config/schema.js';
import type { DependencyStatus } from '../dependency-status.js';
import type { Logger } from '../log.js';
import type { DispatchMetrics } from './dispatcher.js';
import type { Fanout } from './fanout.js';
import { answerCall, type FromWorker, type MetricsReport, type ServedParts, type SinkStatus, type ToWorker, type WorkerData } from './thread-messages.js';

export interface FanoutThreadDeps {
  config: Config;
  /** Only this process serves the database (SQLite). */
  exclusive: boolean;
  /** Whether the worker traces (from the same OTEL_* variables as this thread). */
  tracing: boolean;
  /** Served to the worker on this thread's database connection. */
  parts: ServedParts;
  /** This thread's registry's counters, which the worker's reports add to. */
  metrics: DispatchMetrics;
  sinkNames: string[];
  logger: Logger;
}

/** Restarts after a crash wait from the shortest, doubling up to the longest while the worker keeps crashing. */
const RESTART_MS = { min: 1000, max: 30_000 };

/** A worker that lived this long before it crashed is restarted after the shortest wait again. */
const HEALTHY_RUN_MS = 60_000;

/**
 * How long past the grace a stopping worker may take to close its sinks (the NATS drain waits up to
 * its 5 s ack timeout) before it is terminated: a hung worker must not hold the process past its budget.
 */
const STOP_MARGIN_MS = 5000;

const NOT_RUNNING: DependencyStatus = { state: 'down', error: 'the fan-out worker is not running' };

/**
 * The fan-out in a worker thread, so the receive thread only receives. The worker's storage calls
 * run here, on the one connection (on SQLite a second writer would contend for the file's write
 * lock); its metrics and sink status come in batches. A worker that crashes is restarted: its rows
 * stay leased until the new worker frees stale leases at start (SQLite) or the leases expire.
 */
export function createFanoutThread(deps: FanoutThreadDeps): Fanout {
  const log = deps.logger.child({ part: 'fanout-thread' });
  const natsEnabled = deps.config.natsUrl !== undefined;
  let status: SinkStatus = { up: {}, nats: undefined };
  let worker: Worker | undefined;
  let stopping = false;
  let crashes = 0;
  let restartTimer: NodeJS.Timeout | undefined;
  let wakeQueued = false;

  const post = (message: ToWorker) => worker?.postMessage(message);

  const applyMetrics = ({ deliveries, durations }: MetricsReport) => {
    for (const [sink, outcome, count] of deliveries) deps.metrics.sinkDeliveries.inc({ sink, outcome }, count);
    for (const [sink, seconds] of durations) deps.metrics.sinkDeliveryDuration.observe({ sink }, seconds);
  };

  /** Starts a worker; resolves once its dispatcher has started. */
  const spawn = (): Promise<void> =>
    new Promise((resolve, reject) => {
      const thread = new Worker(new URL('./fanout-worker.js', import.meta.url), {
        workerData: { config: deps.config, exclusive: deps.exclusive, tracing: deps.tracing } satisfies WorkerData,
      });
      worker = thread;
      const spawnedAt = performance.now();
      let started = false;
      let failure: Error | undefined;
      thread.on('message', (message: FromWorker) => {
        switch (message.kind) {
          case 'call':
            // Answered to the worker that asked, even if it has been replaced meanwhile.
            return void answerCall(deps.parts, message, (answer) => thread.postMessage(answer));
          case 'metrics':
            return applyMetrics(message.report);
          case 'status':
            return void (status = message.status);
          case 'started':
            started = true;
            return resolve();
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
        status = { up: {}, nats: undefined };
        if (!started) reject(failure ?? new Error(`the fan-out worker exited (code ${code}) before it started`));
        if (stopping) return;
        crashes = performance.now() - spawnedAt >= HEALTHY_RUN_MS ? 1 : crashes + 1;
        const delayMs = Math.min(RESTART_MS.max, RESTART_MS.min * 2 ** (crashes - 1));
        log.error({ code, restartInMs: delayMs }, 'the fan-out worker stopped; restarting it (its rows are released at its restart or when their leases end)');
        // A restart that fails is logged above and scheduled again by its own exit.
        restartTimer = setTimeout(() => spawn().catch(() => {}), delayMs).unref();
      });
    });

  return {
    sinks: deps.sinkNames.map((name) => ({ name, up: () => status.up[name] ?? false })),
    natsStatus: () => (natsEnabled ? (status.nats ?? NOT_RUNNING) : undefined),
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
    /** One message per turn, however many commits the turn had. */
    wake() {
      if (wakeQueued || !worker) return;
      wakeQueued = true;
      setImmediate(() => {
        wakeQueued = false;
        post({ kind: 'wake' });
      });
    },
    sinkStateChanged: (sink) => post({ kind: 'sinkStateChanged', sink }),
    async stop(graceMs) {
      stopping = true;
      clearTimeout(restartTimer);
      const thread = worker;
      if (!thread) return;
      const exited = once(thread, 'exit');
      thread.postMessage({ kind: 'stop', graceMs } satisfies ToWorker);
      const overdue = setTimeout(() => {
        log.error(
          { waitedMs: graceMs + STOP_MARGIN_MS },
          'the fan-out worker did not stop within the shutdown budget; terminating it (its rows are released at the next start or when their leases end)',
        );
        void thread.terminate();
      }, graceMs + STOP_MARGIN_MS);
      await exited;
      clearTimeout(overdue);
    },
  };
}
