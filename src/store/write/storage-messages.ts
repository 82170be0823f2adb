import type { MessagePort } from 'node:worker_threads';
import type { SerializedError } from '../../threads/errors.js';
import type { SqliteWriter } from '../engines/sqlite-writes.js';
import type { DeliveryWriter, RecordResult } from './delivery-sql.js';

/** What the storage thread opens: the SQLite file the main thread has migrated. */
export interface StorageData {
  file: string;
  synchronous: 'FULL' | 'EXTRA' | 'NORMAL';
  busyTimeoutMs: number;
}

/**
 * What the storage thread serves on every port it has: the writes of every connection that does not
 * write itself (the main thread's, the fan-out worker's); its writer commits those of one turn of its
 * event loop together.
 */
export type StorageCalls = DeliveryWriter & SqliteWriter;

/** One delivery's outcome in a turn's answer: its own result, or its own error. */
export type Recorded = RecordResult | { error: SerializedError };

/** The deliveries the main thread was handed in one turn of its loop, in one message. */
export interface DeliveryTurns {
  /** `packed` by `packDeliveries` (its buffer transferred); answered once each has its outcome, in their order. */
  record(packed: Uint8Array): Promise<Recorded[]>;
}

/** Another thread's own port to the storage thread (`link`), which the main thread hears of. */
export interface StorageLinks {
  /** Resolves once the link's other end has closed (its thread gone) and every call it sent has been answered. */
  drained(id: number): Promise<void>;
}

export type StorageParts = { storage: StorageCalls; deliveries: DeliveryTurns; links: StorageLinks };

/** Besides the calls: the thread is ready (its connection open); a port for another thread; close. */
export type FromStorage = { kind: 'ready' };
export type ToStorage = { kind: 'link'; id: number; port: MessagePort } | { kind: 'close' };
