import type { SinkMinute } from '../state/stats.js';
import type { DeliveryWriter } from './delivery-sql.js';

/** What the storage thread opens: the SQLite file the main thread has migrated. */
export interface StorageData {
  file: string;
  synchronous: 'FULL' | 'EXTRA' | 'NORMAL';
  busyTimeoutMs: number;
}

/**
 * What the storage thread serves: the deliveries, each handed over as it comes (the thread's writer
 * groups those of one turn of its own event loop in one commit), and the serving path's other
 * writes, so none waits on the receive thread's event loop.
 */
export interface StorageCalls extends DeliveryWriter {
  /** The readiness probe's durable write. */
  beat(now: number): Promise<void>;
  /** The delivery tally's per-minute counts. */
  addSinkMinutes(counts: SinkMinute[]): Promise<void>;
}

export type StorageParts = { storage: StorageCalls };

/** Besides the calls: the thread is ready (its connection open), and it is told to close. */
export type FromStorage = { kind: 'ready' };
export type ToStorage = { kind: 'close' };
