import type { MessagePort } from 'node:worker_threads';
import type { Config } from '../config/schema.js';
import type { DependencyStatus } from '../dependency-status.js';
import { causeChain } from '../errors.js';
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
 * the main thread runs the method and answers.
 */

/** The main thread's parts the worker's dispatcher calls. */
export interface ServedParts {
  log: FanoutStore['log'];
  exceptions: FanoutStore['exceptions'];
  sinkStates: SinkStates;
  pauses: Pauses;
  operatorEvents: OperatorEvents;
  attempts: AttemptLog;
}
export type ServedPart = keyof ServedParts;

export interface WorkerData {
  config: Config;
  /** Only this process serves the database (SQLite): leases left by a previous run are stale at start. */
  exclusive: boolean;
  /** The main thread traces: the worker builds its tracing from the same OTEL_* variables. */
  tracing: boolean;
  /** Names the worker's leases, so the main thread can free them if the worker dies. */
  owner: string;
  /**
   * A SQLite file: the worker reads the log and writes its cursors, claims and attempts through a
   * connection of its own (WAL: beside the storage thread's writes), not through the main thread.
   */
  ownDatabase?: DatabaseOptions;
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

export type FromWorker =
  | { kind: 'call'; id: number; part: ServedPart; method: string; args: unknown[] }
  | { kind: 'metrics'; report: MetricsReport }
  | { kind: 'status'; status: SinkStatus }
  | { kind: 'log'; line: string }
  | { kind: 'started' }
  | { kind: 'settled' }
  | { kind: 'sinkStateTaken' }
  | { kind: 'stopped' };

export type ToWorker =
  | { kind: 'answer'; id: number; value?: unknown; error?: ThreadError }
  | { kind: 'wake'; scope: WakeScope }
  | { kind: 'sinkStateChanged'; sink: string }
  | { kind: 'settle' }
  | { kind: 'stop'; graceMs: number };

/**
 * An error as it crosses to the worker: what its log line shows inline (message, code, where it was
 * thrown, and its causes: a storage failure's reason is its cause, e.g. the disk being full).
 */
export interface ThreadError {
  message: string;
  name?: string;
  code?: string;
  stack?: string;
  cause?: ThreadError;
}

/** An error as it is posted to the other thread: each link of its cause chain (bounded: a chain may loop) as plain data. */
export function serializeError(error: unknown): ThreadError {
  const links = causeChain(error).map((link): ThreadError => {
    if (!(link instanceof Error)) return { message: String(link) };
    const { code } = link as { code?: unknown };
    return {
      message: link.message,
      name: link.name,
      ...(link.stack === undefined ? {} : { stack: link.stack }),
      ...(typeof code === 'string' ? { code } : {}),
    };
  });
  return links.reduceRight<ThreadError | undefined>((cause, link) => (cause ? { ...link, cause } : link), undefined) ?? { message: String(error) };
}

export function errorFrom({ message, name, code, stack, cause }: ThreadError): Error {
  const error = new Error(message, cause ? { cause: errorFrom(cause) } : undefined);
  return Object.assign(error, name ? { name } : {}, stack ? { stack } : {}, code ? { code } : {});
}

/** Runs a worker's call on the served part and posts the answer (an error as its message, code, stack and causes). */
export async function answerCall(parts: ServedParts, call: Extract<FromWorker, { kind: 'call' }>, post: (message: ToWorker) => void): Promise<void> {
  try {
    const part = parts[call.part] as unknown as Record<string, unknown>;
    const method = part[call.method];
    if (typeof method !== 'function') throw new Error(`${call.part} has no method ${call.method}`);
    post({ kind: 'answer', id: call.id, value: await (method as (...args: unknown[]) => unknown)(...call.args) });
  } catch (error) {
    post({ kind: 'answer', id: call.id, error: serializeError(error) });
  }
}

/** The worker's side: each served part as an object whose methods post a call and await the answer. */
export function createCaller(port: MessagePort) {
  let nextId = 0;
  const waiting = new Map<number, { resolve(value: unknown): void; reject(error: Error): void }>();
  const answered = (answer: Extract<ToWorker, { kind: 'answer' }>) => {
    const call = waiting.get(answer.id);
    waiting.delete(answer.id);
    if (!answer.error) return call?.resolve(answer.value);
    call?.reject(errorFrom(answer.error));
  };
  const remote = <P extends ServedPart>(part: P): ServedParts[P] =>
    new Proxy({} as ServedParts[P], {
      get: (_target, method) =>
        // Not a thenable: awaiting the part itself must not post a call.
        typeof method !== 'string' || method === 'then'
          ? undefined
          : (...args: unknown[]) =>
              new Promise((resolve, reject) => {
                const id = nextId++;
                waiting.set(id, { resolve, reject });
                port.postMessage({ kind: 'call', id, part, method, args } satisfies FromWorker);
              }),
    });
  return { answered, remote };
}
