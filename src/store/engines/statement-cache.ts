import type BetterSqlite3 from 'better-sqlite3';

/**
 * `prepare` that keeps the statements it made, keyed by SQL text. Kysely prepares every query
 * anew, and on SQLite a prepare (parse and plan) costs more than running the dispatcher's small
 * statements; the texts repeat, so each is prepared once. Bounded (oldest out first), as IN lists
 * of every length make distinct texts. Safe because nothing iterates a statement (no streaming):
 * each use runs to completion before the next can start.
 */
export function statementCache(sqlite: BetterSqlite3.Database, capacity = 500): (sql: string) => BetterSqlite3.Statement {
  const statements = new Map<string, BetterSqlite3.Statement>();
  return (sql) => {
    let statement = statements.get(sql);
    if (statement === undefined) {
      statement = sqlite.prepare(sql);
      if (statements.size >= capacity) statements.delete(statements.keys().next().value as string);
      statements.set(sql, statement);
    }
    return statement;
  };
}
