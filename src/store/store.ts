import { deferAutocheckpoint, startCheckpointer } from './engines/checkpointer.js';
import { isSqliteFile, type Database, type DatabaseOptions } from './engines/database.js';
import type { DeliveryWriter } from './write/delivery-sql.js';
import { createLogCursors } from './log/cursors.js';
import { openMigrated } from './engines/migrate.js';
import { createPostgresDeliveryWriter } from './write/postgres-delivery-writer.js';
import { createSqliteDeliveryWriter } from './write/sqlite-delivery-writer.js';
import { beatQuery } from './state/heartbeat.js';
import { addSinkMinutes, type SinkMinute } from './state/stats.js';
import { startStorageThread } from './write/storage-thread.js';
import { createSequencer, startSequencing, type SequenceLog } from './log/sequencer.js';

export interface Store {
  database: Database;
  writer: DeliveryWriter;
  /** Gives log positions to what was committed without one (PostgreSQL; SQLite numbers as it inserts). */
  sequenceLog: SequenceLog;
  /** A tiny durable write: true when storage accepts commits now. */
  checkWritable(now: number): Promise<boolean>;
  /** Resolves once the storage thread, if any, has opened its connection (`serve` awaits it before listening). */
  started(): Promise<void>;
  /** The delivery tally's per-minute counts, written where the deliveries are. */
  addSinkMinutes(counts: SinkMinute[]): Promise<void>;
  close(): Promise<void>;
}

export interface StoreOptions extends DatabaseOptions {
  /** Called once new fan-out work is in the log (committed, and numbered), so the dispatcher starts at once. */
  onCommit?: () => void;
  /** How often deliveries committed by other processes are numbered (PostgreSQL). */
  sequenceIntervalMs?: number;
  /**
   * SQLite file: the deliveries' group commit, the readiness write and the delivery tally run in a
   * thread of their own, on a connection of its own, so the caller's event loop never waits on the disk.
   */
  storageThread?: boolean;
  /** The storage thread ended by itself (a crash): nothing can be stored any more in this process. */
  onStorageLost?: (error: Error) => void;
  /** Each storage failure (a delivery or a readiness write refused, a connection lost), to log its cause. */
  onFailure?: (error: unknown) => void;
}

/** Opens the database named by the config, migrates it, and picks the engine's write path. */
export async function openStore(options: StoreOptions): Promise<Store> {
  const { onFailure = () => {} } = options;
  const { database } = await openMigrated({ onConnectionError: onFailure, ...options });
  const { onCommit = () => {} } = options;
  const sequenceLog: SequenceLog = database.dialect === 'postgres' ? createSequencer(database) : async () => 0;
  const sequencing =
    database.dialect === 'postgres'
      ? startSequencing({ sequence: sequenceLog, onNumbered: onCommit, onError: onFailure, intervalMs: options.sequenceIntervalMs ?? 1000 })
      : undefined;
  const threaded =
    options.storageThread && database.dialect === 'sqlite' && isSqliteFile(options.url)
      ? startStorageThread({ file: options.url, synchronous: database.synchronous, busyTimeoutMs: options.busyTimeoutMs ?? 5000 }, {
          onCommit,
          onLost: options.onStorageLost ?? onFailure,
        })
      : undefined;
  const engineWriter =
    threaded ??
    (database.dialect === 'sqlite'
      ? createSqliteDeliveryWriter(database, onCommit)
      : createPostgresDeliveryWriter({
          connect: () => database.connectOwn('writer'),
          ensureCursors: createLogCursors(database).ensureCursors,
          onCommit: () => sequencing?.request(),
          commitWithinMs: options.timeoutMs,
        }));
  let checkpointer: { stop(): Promise<void> } | undefined;
  if (database.dialect === 'sqlite' && isSqliteFile(options.url)) {
    deferAutocheckpoint(database.sqlite);
    checkpointer = startCheckpointer({ file: options.url, synchronous: database.synchronous, onError: onFailure });
  }
  const reported = <T>(promise: Promise<T>): Promise<T> =>
    promise.catch((error: unknown) => {
      onFailure(error);
      throw error;
    });
  return {
    database,
    sequenceLog,
    writer: { record: (delivery) => reported(engineWriter.record(delivery)) },
    checkWritable: (now) => reported((threaded ? threaded.beat(now) : beatQuery(database.kysely, now).execute()).then(() => true)),
    started: () => threaded?.started ?? Promise.resolve(),
    addSinkMinutes: (counts) => (threaded ? threaded.addSinkMinutes(counts) : addSinkMinutes(database, counts)),
    async close() {
      await sequencing?.stop();
      await threaded?.close();
      await checkpointer?.stop();
      await database.close();
    },
  };
}
