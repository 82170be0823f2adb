import type { CompiledQuery } from 'kysely';
import type { Database } from './database.js';

interface Query<O> {
  compile(): CompiledQuery<O>;
  execute(): Promise<O[]>;
}

/**
 * One statement whose loss in a power failure would only repeat work, never lose it: a lease, the
 * record of a delivered row (the row is then sent again, which at-least-once fan-out allows, and a
 * restart releases leases anyway). On SQLite it commits at synchronous=NORMAL, without an fsync of its own
 * that would stall the event loop: the WAL is append-only, so the next delivery commit's sync makes it
 * durable too. The configured level is restored before anything else can run on the connection.
 * Answers the rows of a RETURNING statement (none for others). PostgreSQL runs it as usual.
 */
export async function executeUnsynced<O>(database: Database, query: Query<O>): Promise<O[]> {
  if (database.dialect !== 'sqlite') return query.execute();
  const { sql, parameters } = query.compile();
  return unsynced(database, (prepare) => {
    const statement = prepare(sql);
    if (statement.reader) return statement.all(...parameters) as O[];
    statement.run(...parameters);
    return [];
  });
}

export type SqliteDatabase = Extract<Database, { dialect: 'sqlite' }>;

/** A statement to run once per row of parameters. */
export interface EachRow {
  sql: string;
  rows: readonly (readonly unknown[])[];
}

/** A compiled statement to run once. */
export const once = (query: CompiledQuery): EachRow => ({ sql: query.sql, rows: [query.parameters] });

/** Statements, each run once per row of its parameters, in one transaction committed as executeUnsynced commits. */
export async function runEachUnsynced(database: SqliteDatabase, statements: readonly EachRow[]): Promise<void> {
  return inUnsyncedTransaction(database, (prepare) => {
    const prepared = statements.map((statement) => ({ statement: prepare(statement.sql), rows: statement.rows }));
    prepared.forEach(({ statement, rows }) => rows.forEach((row) => statement.run(...row)));
  });
}

/** `work` in one write transaction (taken at once), committed as executeUnsynced commits: what it reads, no other writer changes before the commit. */
export async function inUnsyncedTransaction(database: SqliteDatabase, work: (prepare: SqliteDatabase['prepare']) => void): Promise<void> {
  unsynced(database, (prepare) => database.sqlite.transaction(() => work(prepare)).immediate());
}

/** Runs `work` on SQLite at synchronous=NORMAL, then restores the configured level. */
function unsynced<T>(database: SqliteDatabase, work: (prepare: SqliteDatabase['prepare']) => T): T {
  const { prepare } = database;
  prepare('PRAGMA synchronous = NORMAL').run();
  try {
    return work(prepare);
  } finally {
    prepare(`PRAGMA synchronous = ${database.synchronous}`).run();
  }
}
