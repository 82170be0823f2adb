import type { ThreadError } from '../../dispatch/thread-messages.js';
import type { SinkMinute } from '../state/stats.js';
import type { NewDelivery, RecordResult } from './delivery-sql.js';

/** What the storage thread opens: the SQLite file the main thread has migrated. */
export interface StorageData {
  file: string;
  synchronous: 'FULL' | 'EXTRA' | 'NORMAL';
  busyTimeoutMs: number;
}

/** The serving path's other writes, which the storage thread runs too: none waits on this thread's event loop. */
export interface StorageCalls {
  /** The readiness probe's durable write. */
  beat(now: number): Promise<void>;
  /** The delivery tally's per-minute counts. */
  addSinkMinutes(counts: SinkMinute[]): Promise<void>;
}

export type Settled<T> = { value: T } | { error: ThreadError };

/** The deliveries of one turn of the main thread's event loop go as one `record`. */
export type ToStorage =
  | { kind: 'record'; id: number; deliveries: NewDelivery[] }
  | { [M in keyof StorageCalls]: { kind: 'call'; id: number; method: M; args: Parameters<StorageCalls[M]> } }[keyof StorageCalls]
  | { kind: 'close' };

export type FromStorage =
  | { kind: 'ready' }
  | { kind: 'recorded'; id: number; results: Settled<RecordResult>[] }
  | { kind: 'answered'; id: number; result: Settled<void> };
