import { SERVING_AUTOCHECKPOINT_PAGES, startCheckpointer } from './engines/checkpointer.js';
import type { Database, DatabaseOptions } from './engines/database.js';
import type { DeliveryWriter } from './write/delivery-sql.js';
import { createLogCursors } from './log/cursors.js';
import { openMigrated } from './engines/migrate.js';
import { createPostgresDeliveryWriter } from './write/postgres-delivery-writer.js';
import { createSqliteDeliveryWriter } from './write/sqlite-delivery-writer.js';

export interface Store {
  database: Database;
  writer: DeliveryWriter;
  /** A tiny durable write: true when storage accepts commits now. */
  checkWritable(now: number): Promise<boolean>;
  close(): Promise<void>;
}

export interface StoreOptions extends DatabaseOptions {
  /** Called after a commit that stored new fan-out work, so the dispatcher starts at once. */
  onCommit?: () => void;
  /** Each storage failure (a delivery or a readiness write refused, a connection lost), to log its cause. */
  onFailure?: (error: unknown) => void;
}

/** Opens the database named by the config, migrates it, and picks the engine's write path. */
export async function openStore(options: StoreOptions): Promise<Store> {
  const { onFailure = () => {} } = options;
  const { database } = await openMigrated({ onConnectionError: onFailure, ...options });
  const engineWriter =
    database.dialect === 'sqlite'
      ? createSqliteDeliveryWriter(database, options.onCommit)
      : createPostgresDeliveryWriter(database.connect, createLogCursors(database).ensureCursors, options.onCommit);
  let checkpointer: { stop(): Promise<void> } | undefined;
  if (database.dialect === 'sqlite' && options.url !== ':memory:') {
    database.sqlite.pragma(`wal_autocheckpoint = ${SERVING_AUTOCHECKPOINT_PAGES}`);
    checkpointer = startCheckpointer({ file: options.url, synchronous: database.synchronous, onError: onFailure });
  }
  const reported = <T>(promise: Promise<T>): Promise<T> =>
    promise.catch((error: unknown) => {
      onFailure(error);
      throw error;
    });
  return {
    database,
    writer: { record: (delivery) => reported(engineWriter.record(delivery)) },
    checkWritable: (now) =>
      reported(
        database.kysely
          .insertInto('heartbeat')
          .values({ id: 1, beat_at: now })
          .onConflict((c) => c.column('id').doUpdateSet({ beat_at: now }))
          .execute()
          .then(() => true),
      ),
    async close() {
      await checkpointer?.stop();
      await database.close();
    },
  };
}
