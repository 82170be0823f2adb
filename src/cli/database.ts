import type { Config } from '../config/schema.js';
import { databaseOptionsOf } from '../store/engines/database.js';
import { openMigrated, type MigratedDatabase } from '../store/engines/migrate.js';

/** The database named by the config, opened and migrated as `serve` opens it. */
export function openConfiguredDatabase(config: Config): Promise<MigratedDatabase> {
  return openMigrated(databaseOptionsOf(config));
}

/** Opens (and migrates) the configured database for one command and closes it after. */
export async function withDatabase<T>(config: Config, fn: (opened: MigratedDatabase) => Promise<T>): Promise<T> {
  const opened = await openConfiguredDatabase(config);
  try {
    return await fn(opened);
  } finally {
    await opened.database.close();
  }
}
