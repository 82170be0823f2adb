import { CompiledQuery } from 'kysely';
import { RelayError } from '../../errors.js';
import type { Database } from './database.js';
import { once, runStatements, type WriteStatement } from './sqlite-writes.js';

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
 * A transaction that reads before it writes, by a name the storage thread knows it by
 * (`WRITER_TRANSACTIONS`): on a connection that does not write, it is run whole by the writer, as
 * its arguments must cross to that thread (plain data).
 */
export interface NamedTransaction<A, R> {
  name: string;
  steps(database: Database, args: A): Steps<R>;
}

/** A transaction begun on a SQLite connection opened `query_only`, whose writes go to the storage thread. */
export class NotTheWriterError extends RelayError {
  readonly code = 'not_the_writer';
  constructor() {
    super('a transaction on a SQLite connection that does not write: send it to the writer (runStatementTransaction, runNamedTransaction)');
  }
}

/**
 * Runs the steps as one transaction. On SQLite the connection is shared with the group-commit
 * writer and every Kysely query, so nothing may run between BEGIN and COMMIT: the whole transaction
 * runs synchronously (better-sqlite3), no await inside. On PostgreSQL it is a transaction of its
 * own pooled connection.
 */
export async function runTransaction<T>(database: Database, steps: () => Steps<T>): Promise<T> {
  if (database.dialect === 'sqlite') {
    if (database.writer) throw new NotTheWriterError();
    return database.sqlite.transaction(() => walkSteps(database, steps())).immediate();
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

/** The steps run on a SQLite connection that writes, inside the transaction the caller holds. */
export function walkSteps<T>(database: Extract<Database, { dialect: 'sqlite' }>, walk: Steps<T>): T {
  let next = walk.next();
  while (!next.done) next = walk.next(runStatements(database.prepare, [once(next.value)])[0]!);
  return next.value;
}

/** A named transaction: here, or on a connection that does not write, in the writer. */
export async function runNamedTransaction<A, R>(database: Database, transaction: NamedTransaction<A, R>, args: A): Promise<R> {
  if (database.dialect === 'sqlite' && database.writer) return (await database.writer.runNamedTransaction(transaction.name, args)) as R;
  return runTransaction(database, () => transaction.steps(database, args));
}

/**
 * Statements that commit together, none depending on what another did beyond `ifChanged`; each
 * one's result. On a connection that does not write, the writer runs them.
 */
export async function runStatementTransaction(database: Database, statements: readonly WriteStatement[]): Promise<StatementResult[]> {
  if (database.dialect === 'sqlite') {
    if (database.writer) return database.writer.write(statements, 'synced');
    return database.sqlite.transaction(() => runStatements(database.prepare, statements)).immediate();
  }
  return runTransaction(database, function* () {
    const results: StatementResult[] = [];
    for (const { sql, rows, ifChanged } of statements) {
      const result: StatementResult = { rows: [], changed: 0 };
      results.push(result);
      if (ifChanged !== undefined && !results[ifChanged]?.changed) continue;
      for (const row of rows) {
        const { rows: answered, changed } = yield CompiledQuery.raw(sql, [...row]);
        for (const one of answered) result.rows.push(one);
        result.changed += changed;
      }
    }
    return results;
  });
}
