import type BetterSqlite3 from 'better-sqlite3';
import type { CompiledQuery } from 'kysely';
import type { StatementResult } from './transactions.js';

/**
 * A statement of a write as plain data (it crosses to the storage thread): run once per row of
 * parameters. With `ifChanged`, run only when the statement at that index, earlier in the same
 * write, changed rows (an audit row only when the change was made, a page only when its progress moved).
 */
export interface WriteStatement {
  sql: string;
  rows: readonly (readonly unknown[])[];
  ifChanged?: number;
}

/** A compiled statement to run once. */
export const once = (query: CompiledQuery, ifChanged?: number): WriteStatement => ({
  sql: query.sql,
  rows: [query.parameters],
  ...(ifChanged === undefined ? {} : { ifChanged }),
});

/** `synced`: durable when answered (synchronous as configured); `unsynced`: a power failure may lose it, which only repeats work. */
export type Durability = 'synced' | 'unsynced';

/**
 * The writes of a connection that does not write itself (`PRAGMA query_only`): each goes to the
 * thread that owns the file's one write connection (the storage thread), is committed there with
 * whatever else that thread commits in the same turn, and is answered after the commit.
 */
export interface SqliteWriter {
  /** Statements that commit together; each one's rows (RETURNING) and how many rows it changed. */
  write(statements: readonly WriteStatement[], durability: Durability): Promise<StatementResult[]>;
  /** A transaction that reads before it writes, run whole by the writer: one of its `NamedTransaction`s, by name. */
  runNamedTransaction(name: string, args: unknown): Promise<unknown>;
}

/** Runs the statements on a connection that writes, inside the transaction the caller holds. */
export function runStatements(prepare: (sql: string) => BetterSqlite3.Statement, statements: readonly WriteStatement[]): StatementResult[] {
  const results: StatementResult[] = [];
  for (const { sql, rows, ifChanged } of statements) {
    const result: StatementResult = { rows: [], changed: 0 };
    results.push(result);
    if (ifChanged !== undefined && !results[ifChanged]?.changed) continue;
    const statement = prepare(sql);
    for (const row of rows) {
      // A write with RETURNING answers one row per row it changed.
      if (statement.reader) {
        const answered = statement.all(...row);
        for (const one of answered) result.rows.push(one);
        result.changed += answered.length;
      } else {
        result.changed += statement.run(...row).changes;
      }
    }
  }
  return results;
}
