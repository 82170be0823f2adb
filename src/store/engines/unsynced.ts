import type { CompiledQuery } from 'kysely';
import type { StatementResult } from './transactions.js';
import type { Database } from './database.js';
import { once, runStatements, type WriteStatement } from './sqlite-writes.js';

interface Query<O> {
  compile(): CompiledQuery<O>;
  execute(): Promise<O[]>;
}

/**
 * One statement whose loss in a power failure would only repeat work, never lose it: a lease, the
 * record of a delivered row (the row is then sent again, which at-least-once fan-out allows, and a
 * restart releases leases anyway). On SQLite it commits at synchronous=NORMAL, without an fsync of its own
 * that would stall the writer: the WAL is append-only, so the next delivery commit's sync makes it
 * durable too. The configured level is restored before anything else can run on the connection.
 * Answers the rows of a RETURNING statement (none for others). PostgreSQL runs it as usual.
 */
export async function executeUnsynced<O>(database: Database, query: Query<O>): Promise<O[]> {
  if (database.dialect !== 'sqlite') return query.execute();
  const [result] = await runEachUnsynced(database, [once(query.compile())]);
  return result!.rows as O[];
}

type SqliteDatabase = Extract<Database, { dialect: 'sqlite' }>;

/** Statements, each run once per row of its parameters, in one transaction committed as executeUnsynced commits. */
export async function runEachUnsynced(database: SqliteDatabase, statements: readonly WriteStatement[]): Promise<StatementResult[]> {
  if (database.writer) return database.writer.write(statements, 'unsynced');
  return unsynced(database, () => database.sqlite.transaction(() => runStatements(database.prepare, statements)).immediate());
}

/** Runs `work` on SQLite at synchronous=NORMAL, then restores the configured level. */
export function unsynced<T>(database: SqliteDatabase, work: () => T): T {
  const { prepare } = database;
  prepare('PRAGMA synchronous = NORMAL').run();
  try {
    return work();
  } finally {
    prepare(`PRAGMA synchronous = ${database.synchronous}`).run();
  }
}
