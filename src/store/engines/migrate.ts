import { DEFAULT_MIGRATION_TABLE, Migrator, sql, type MigrationResult, type MigrationResultSet } from 'kysely';
import { migrations } from '../../../migrations/index.js';
import { describeError, RelayError } from '../../errors.js';
import { DatabaseOpenError, databaseLocation, openDatabase, type Database, type DatabaseOptions } from './database.js';
import { RELAY_SCHEMA } from './schema-introspector.js';

export class MigrationError extends RelayError {
  readonly code = 'migration_failed';
}

/** A newer relay migrated the database: this one does not know its schema and must not run on it. */
export class UnknownMigrationError extends RelayError {
  readonly code = 'unknown_migration';
  constructor(
    url: string,
    readonly unknown: string[],
  ) {
    super(
      `the database (BOXRELAY_DATABASE: ${databaseLocation(url)}) holds migration ${unknown.join(', ')}, which this boxrelay ` +
        'does not know: a newer boxrelay migrated it; run that version or a newer one (this one never runs on a schema it does not understand)',
    );
  }
}

/** Runs pending migrations. Kysely's Migrator takes a lock, so replicas starting together migrate once. */
export async function migrateToLatest(database: Database): Promise<MigrationResultSet['results']> {
  const { error, results } = await (await createMigrator(database)).migrateToLatest();
  if (error) {
    const failed = results?.find((r) => r.status === 'Error')?.migrationName ?? 'unknown';
    throw new MigrationError(`migration ${failed} failed: ${describeError(error)}`, { cause: error });
  }
  return results;
}

/** Kysely's migrator over this relay's migrations. */
export async function createMigrator(database: Database): Promise<Migrator> {
  return new Migrator({
    db: database.kysely,
    provider: { getMigrations: async () => migrations },
    // Kysely looks for its own tables in every schema; pin them to ours so one schema per deployment works.
    migrationTableSchema: database.dialect === 'postgres' ? await currentSchema(database) : undefined,
  });
}

export interface MigratedDatabase {
  database: Database;
  /** What this opening applied (empty when the schema was already the latest). */
  migrations: MigrationResult[];
}

/** Opens the database and migrates it to the latest schema; one whose migration fails is closed again. */
export async function openMigrated(options: DatabaseOptions): Promise<MigratedDatabase> {
  const database = await openReachable(options);
  // A migration may run long, or wait for another replica's: not under the serving timeouts.
  const migrating = database.dialect === 'postgres' && options.timeoutMs !== undefined ? openDatabase({ ...options, timeoutMs: undefined }) : database;
  try {
    return { database, migrations: await migrateChecked(migrating, options.url) };
  } catch (error) {
    await database.close();
    throw error;
  } finally {
    if (migrating !== database) await migrating.close();
  }
}

/**
 * Refuses a database that a newer relay migrated (naming the migrations this one does not know)
 * before writing anything, then migrates it to the latest schema.
 */
export async function migrateChecked(database: Database, url: string): Promise<MigrationResult[]> {
  const unknown = (await appliedMigrations(database)).filter((name) => !(name in migrations));
  if (unknown.length > 0) throw new UnknownMigrationError(url, unknown);
  return (await migrateToLatest(database)) ?? [];
}

/** Opens the database and makes one round trip, so a refused open names BOXRELAY_DATABASE and where it points. */
export async function openReachable(options: DatabaseOptions): Promise<Database> {
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
  const { rows } = await sql<{ schema: string }>`SELECT ${RELAY_SCHEMA} AS schema`.execute(database.kysely);
  return rows[0]!.schema;
}

/** The migrations the database records as applied (Kysely's table, where migrateToLatest keeps it); none for a new database. */
export async function appliedMigrations(database: Database): Promise<string[]> {
  const schema = database.dialect === 'postgres' ? await currentSchema(database) : undefined;
  const { rows: found } = await (schema === undefined
    ? sql`SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ${DEFAULT_MIGRATION_TABLE}`
    : sql`SELECT 1 WHERE to_regclass(format('%I.%I', ${schema}::text, ${DEFAULT_MIGRATION_TABLE}::text)) IS NOT NULL`
  ).execute(database.kysely);
  if (found.length === 0) return [];
  const table = sql.table(schema === undefined ? DEFAULT_MIGRATION_TABLE : `${schema}.${DEFAULT_MIGRATION_TABLE}`);
  const { rows } = await sql<{ name: string }>`SELECT name FROM ${table} ORDER BY name`.execute(database.kysely);
  return rows.map((row) => row.name);
}

/** The newest migration the database records as applied (their names sort in order); null for a new database. */
export async function newestMigration(database: Database): Promise<string | null> {
  return (await appliedMigrations(database)).at(-1) ?? null;
}
