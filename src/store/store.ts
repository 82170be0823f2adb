import type { Database, DatabaseOptions } from './database.js';
import type { DeliveryWriter } from './delivery-sql.js';
import { openMigrated } from './migrate.js';
import { createPostgresDeliveryWriter } from './postgres-delivery-writer.js';
import { createSqliteDeliveryWriter } from './sqlite-delivery-writer.js';

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
}

/** Opens the database named by the config, migrates it, and picks the engine's write path. */
export async function openStore(options: StoreOptions): Promise<Store> {
  const { database } = await openMigrated(options);
  const writer =
    database.dialect === 'sqlite'
      ? createSqliteDeliveryWriter(database.sqlite, options.onCommit)
      : createPostgresDeliveryWriter(database.kysely, options.onCommit);
  return {
    database,
    writer,
    async checkWritable(now) {
      await database.kysely
        .insertInto('heartbeat')
        .values({ id: 1, beat_at: now })
        .onConflict((c) => c.column('id').doUpdateSet({ beat_at: now }))
        .execute();
      return true;
    },
    close: () => database.close(),
  };
}
