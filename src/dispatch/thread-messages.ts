import type { MessagePort } from 'node:worker_threads';
import type { Config } from '../config/schema.js';
import type { DependencyStatus } from '../dependency-status.js';
import type { SinkOutcome } from '../metrics/metrics.js';
import type { AttemptLog } from '../store/attempts/record-attempts.js';
import type { DatabaseOptions } from '../store/engines/database.js';
import type { FanoutStore } from '../store/fanout-store.js';
import type { SinkStates } from '../store/state/sink-state.js';
import type { OperatorEvents } from './operator-events.js';
import type { WakeScope } from './dispatcher.js';
import type { Pauses } from './pauses.js';

/**
 * What the fan-out worker and the main thread say to each other. The worker's storage seams it
 * does not open itself (`WorkerData.ownDatabase`) are served by the main thread: the worker calls,
 * the main thread runs the method and answers (src/threads/calls.ts).
 */

/** The main thread's parts the worker's dispatcher calls. */
export interface ServedParts {
  log: FanoutStore['log'];
  exceptions: FanoutStore['exceptions'];
  archive: FanoutStore['archive'];
  sinkStates: SinkStates;
  pauses: Pauses;
  operatorEvents: OperatorEvents;
  attempts: AttemptLog;
}

export interface WorkerData {
  config: Config;
  /** Only this process serves the database (SQLite): leases left by a previous run are stale at start. */
  exclusive: boolean;
  /** The main thread traces: the worker builds its tracing from the same OTEL_* variables. */
  tracing: boolean;
  /** Names the worker's leases, so the main thread can free them if the worker dies. */
  owner: string;
  /**
   * The worker's own connections for the log, its claims and its attempts, not through the main
   * thread. A SQLite file: one that only reads (WAL), its writes (cursor moves, claims, settles,
   * attempts) sent to the storage thread over `storage`. PostgreSQL: a pool.
   */
  ownDatabase?: { options: DatabaseOptions; storage?: MessagePort };
}

/** Counts and durations recorded in the worker since its last report, applied to the main thread's registry. */
export interface MetricsReport {
  deliveries: [sink: string, outcome: SinkOutcome, count: number][];
  durations: [sink: string, seconds: number][];
  /** Events a hook's transform failed on (`boxrelay_transform_errors_total`). */
  transformErrors: [sink: string, count: number][];
}

export interface SinkStatus {
  up: Record<string, boolean>;
  /** Attempts waiting for their turn under a hook's maxPerSecond. */
  throttled: Record<string, number>;
  /** Each bus's `/readyz` check, by name. */
  buses: Record<string, DependencyStatus>;
}

/** Besides the worker's calls to the served parts (src/threads/calls.ts). */
export type FromWorker =
  | { kind: 'metrics'; report: MetricsReport }
  | { kind: 'status'; status: SinkStatus }
  | { kind: 'log'; line: string }
  | { kind: 'started' }
  | { kind: 'idle' }
  | { kind: 'sinkStateTaken' }
  | { kind: 'stopped' };

/** Besides the answers to the worker's calls. */
export type ToWorker =
  | { kind: 'wake'; scope: WakeScope }
  | { kind: 'sinkStateChanged'; sink: string }
  | { kind: 'whenIdle' }
  | { kind: 'stop'; graceMs: number };
