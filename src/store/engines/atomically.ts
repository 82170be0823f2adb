import type { CompiledQuery } from 'kysely';
import type { Database } from './database.js';

/** What one statement did: the rows it answered (a SELECT or RETURNING) and how many rows it changed (or answered). */
export interface StatementResult {
  rows: unknown[];
  changed: number;
}

/** Anything Kysely builds that compiles to one statement. */
export interface Compilable {
  compile(): CompiledQuery;
}

/**
 * Statements that commit together, as a generator: it yields each compiled statement and is handed
 * back what it did, so a later statement may depend on an earlier one's outcome.
 */
export type Steps<T> = Generator<CompiledQuery, T, StatementResult>;

/**
 * Runs the steps as one transaction. On SQLite the connection is shared with the group-commit
 * writer and every Kysely query, so nothing may run between BEGIN and COMMIT: the whole transaction
 * runs synchronously (better-sqlite3), no await inside. On PostgreSQL it is a transaction of its
 * own pooled connection.
 */
export async function atomically<T>(database: Database, steps: () => Steps<T>): Promise<T> {
  if (database.dialect === 'sqlite') {
    const { prepare } = database;
    const run = (query: CompiledQuery): StatementResult => {
      const statement = prepare(query.sql);
      // A write with RETURNING answers one row per row it changed.
      if (statement.reader) {
        const rows = statement.all(...query.parameters);
        return { rows, changed: rows.length };
      }
      return { rows: [], changed: statement.run(...query.parameters).changes };
    };
    return database.sqlite
      .transaction(() => {
        const walk = steps();
        let next = walk.next();
        while (!next.done) next = walk.next(run(next.value));
        return next.value;
      })
      .immediate();
  }
  return database.kysely.transaction().execute(async (trx) => {
    const walk = steps();
    let next = walk.next();
    while (!next.done) {
      const result = await trx.executeQuery(next.value);
      next = walk.next({ rows: result.rows, changed: Number(result.numAffectedRows ?? 0) });
    }
    return next.value;
  });
}
