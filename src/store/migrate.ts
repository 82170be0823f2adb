import { Migrator, sql, type MigrationResult, type MigrationResultSet } from 'kysely';
import { migrations } from '../../migrations/index.js';
import { DatabaseOpenError, openDatabase, type Database, type DatabaseOptions } from './database.js';

export class MigrationError extends Error {
  readonly code = 'migration_failed';
}

/** Runs pending migrations. Kysely's Migrator takes a lock, so replicas starting together migrate once. */
export async function migrateToLatest(database: Database): Promise<MigrationResultSet['results']> {
  const migrator = new Migrator({
    db: database.kysely,
    provider: { getMigrations: async () => migrations },
    // Kysely looks for its own tables in every schema; pin them to ours so one schema per deployment works.
    migrationTableSchema: database.dialect === 'postgres' ? await currentSchema(database) : undefined,
  });
  const { error, results } = await migrator.migrateToLatest();
  if (error) {
    const failed = results?.find((r) => r.status === 'Error')?.migrationName ?? 'unknown';
    throw new MigrationError(`migration ${failed} failed: ${(error as Error).message}`, { cause: error });
  }
  return results;
}

export interface MigratedDatabase {
  database: Database;
  /** What this opening applied (empty when the schema was already the latest). */
  migrations: MigrationResult[];
}

/** Opens the database and migrates it to the latest schema; one whose migration fails is closed again. */
export async function openMigrated(options: DatabaseOptions): Promise<MigratedDatabase> {
  const database = await reachable(options);
  // A migration may run long, or wait for another replica's: not under the serving timeouts.
  const migrating = database.dialect === 'postgres' && options.timeoutMs !== undefined ? openDatabase({ ...options, timeoutMs: undefined }) : database;
  try {
    return { database, migrations: (await migrateToLatest(migrating)) ?? [] };
  } catch (error) {
    await database.close();
    throw error;
  } finally {
    if (migrating !== database) await migrating.close();
  }
}

/** Opens the database and makes one round trip, so a refused open names BOXRELAY_DATABASE and where it points. */
async function reachable(options: DatabaseOptions): Promise<Database> {
  let database: Database | undefined;
  try {
    database = openDatabase(options);
    await sql`SELECT 1`.execute(database.kysely);
    return database;
  } catch (error) {
    await database?.close().catch(() => {});
    throw new DatabaseOpenError(options.url, error);
  }
}

async function currentSchema(database: Database): Promise<string> {
  const { rows } = await sql<{ schema: string }>`SELECT current_schema() AS schema`.execute(database.kysely);
  return rows[0]?.schema ?? 'public';
}
