import type { Config } from '../config/schema.js';
import { openDatabase, type Database } from '../store/database.js';

/** The database named by the config, opened as `serve` opens it. */
export function openConfiguredDatabase(config: Config): Database {
  return openDatabase({ url: config.database, sqliteSynchronous: config.sqliteSynchronous, busyTimeoutMs: config.busyTimeoutMs });
}

/** Opens the configured database for one command and closes it after. */
export async function withDatabase<T>(config: Config, fn: (database: Database) => Promise<T>): Promise<T> {
  const database = openConfiguredDatabase(config);
  try {
    return await fn(database);
  } finally {
    await database.close();
  }
}
