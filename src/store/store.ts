import { deferAutocheckpoint, startCheckpointer } from './engines/checkpointer.js';
import { isSqliteFile, type Database, type DatabaseOptions } from './engines/database.js';
import { routeWrites } from './engines/route-writes.js';
import type { DeliveryWriter } from './write/delivery-sql.js';
import { openMigrated } from './engines/migrate.js';
import { createPostgresDeliveryWriter } from './write/postgres-delivery-writer.js';
import { createSqliteWriter } from './write/sqlite-writer.js';
import { beatQuery } from './state/heartbeat.js';
import { startStorageThread, type StorageLink } from './write/storage-thread.js';
import { createSequencer, startSequencing, type SequenceLog } from './log/sequencer.js';

export interface Store {
  /** On a SQLite file served with a storage thread, a connection that only reads: its writes go to that thread. */
  database: Database;
  writer: DeliveryWriter;
  /** Gives log positions to what was committed without one (PostgreSQL; SQLite numbers as it inserts). */
  sequenceLog: SequenceLog;
  /** A tiny durable write: true when storage accepts commits now. */
  checkWritable(now: number): Promise<boolean>;
  /** Resolves once the storage thread, if any, has opened its connection (`serve` awaits it before listening). */
  started(): Promise<void>;
  /**
   * With a storage thread: a port to it for another thread (the fan-out worker), which opens a
   * connection that only reads and sends its writes there (`openLinkedDatabase`).
   */
  link?: () => StorageLink;
  close(): Promise<void>;
}

export interface StoreOptions extends DatabaseOptions {
  /** Called once new fan-out work is in the log (committed, and numbered), so the dispatcher starts at once. */
  onCommit?: () => void;
  /** How often deliveries committed by other processes are numbered (PostgreSQL). */
  sequenceIntervalMs?: number;
  /**
   * SQLite file: one thread of its own owns the file's only write connection and commits every write
   * (the deliveries' group commit, and what every other connection sends it), so the caller's event
   * loop never waits on the disk and no other thread holds the write lock.
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
  const { database: migrated } = await openMigrated({ onConnectionError: onFailure, ...options });
  const { onCommit = () => {} } = options;
  const sequenceLog: SequenceLog = migrated.dialect === 'postgres' ? createSequencer(migrated) : async () => 0;
  const sequencing =
    migrated.dialect === 'postgres'
      ? startSequencing({ sequence: sequenceLog, onNumbered: onCommit, onError: onFailure, intervalMs: options.sequenceIntervalMs ?? 1000 })
      : undefined;
  const threaded =
    options.storageThread && migrated.dialect === 'sqlite' && isSqliteFile(options.url)
      ? startStorageThread({ file: options.url, synchronous: migrated.synchronous, busyTimeoutMs: options.busyTimeoutMs ?? 5000 }, {
          onCommit,
          onLost: options.onStorageLost ?? onFailure,
        })
      : undefined;
  // Migrated: from now on this connection only reads when a storage thread writes.
  const database = threaded && migrated.dialect === 'sqlite' ? routeWrites(migrated, threaded) : migrated;
  const engineWriter =
    threaded ??
    (database.dialect === 'sqlite'
      ? createSqliteWriter(database, { onCommit })
      : createPostgresDeliveryWriter({
          database,
          onCommit: () => sequencing?.request(),
          onFailure,
          commitWithinMs: options.timeoutMs,
        }));
  let checkpointer: { stop(): Promise<void> } | undefined;
  if (database.dialect === 'sqlite' && isSqliteFile(options.url)) {
    if (!threaded) deferAutocheckpoint(database.sqlite);
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
    checkWritable: (now) => reported(beatQuery(database.kysely, now).execute()).then(() => true),
    started: () => threaded?.started ?? Promise.resolve(),
    ...(threaded ? { link: () => threaded.link() } : {}),
    async close() {
      await sequencing?.stop();
      await threaded?.close();
      await checkpointer?.stop();
      await database.close();
    },
  };
}
