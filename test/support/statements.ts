import { Kysely, PostgresDialect, SqliteDialect } from 'kysely';
import type pg from 'pg';
import type { Database } from '../../src/store/engines/database.js';

/** A statement a spied database ran. */
export interface Statement {
  sql: string;
  parameters: readonly unknown[];
  /** Rows it changed (a write) or answered (a read or RETURNING). */
  rows: number;
  /**
   * Turns of the event loop (setImmediate callbacks run) before it, counted while statements run:
   * two statements with the same number ran without the event loop turning between them.
   */
  turn: number;
}

/**
 * A database whose statements are recorded with their parameters and the rows each touched, run on
 * the same connection (SQLite: Kysely, unsynced writes and transactions all prepare through
 * `prepare`) or pool (PostgreSQL: every query of a checked-out client).
 */
export function spy(database: Database, statements: Statement[]): Database {
  let turn = 0;
  let counting = false;
  const record = (sql: string, parameters: readonly unknown[]): Statement => {
    const entry: Statement = { sql, parameters, rows: 0, turn };
    if (!counting) {
      counting = true;
      setImmediate(() => {
        turn++;
        counting = false;
      });
    }
    statements.push(entry);
    return entry;
  };
  if (database.dialect === 'sqlite') {
    const prepare = (text: string) => {
      const statement = database.prepare(text);
      return new Proxy(statement, {
        get(target, key) {
          const value = Reflect.get(target, key) as unknown;
          if (typeof value !== 'function') return value;
          if (!['all', 'run', 'get'].includes(key as string)) return value.bind(target) as unknown;
          return (...args: unknown[]) => {
            const entry = record(text, args);
            const result = (value as (...a: unknown[]) => unknown).apply(target, args);
            if (key === 'run') entry.rows = (result as { changes: number }).changes;
            else if (key === 'all') entry.rows = (result as unknown[]).length;
            else entry.rows = result === undefined ? 0 : 1;
            return result;
          };
        },
      });
    };
    const kysely = new Kysely<never>({ dialect: new SqliteDialect({ database: { prepare, close: () => {} } }) });
    return { ...database, prepare, kysely: kysely as unknown as typeof database.kysely };
  }
  const pool = {
    async connect() {
      const client = await database.pool.connect();
      const query = async (text: string, values: unknown[] = []) => {
        const entry = record(text, values);
        const result = await client.query(text, values);
        entry.rows = result.rowCount ?? result.rows.length;
        return result;
      };
      return new Proxy(client, {
        get(target, key) {
          if (key === 'query') return query;
          const value = Reflect.get(target, key) as unknown;
          return typeof value === 'function' ? (value.bind(target) as unknown) : value;
        },
      }) as pg.PoolClient;
    },
    end: async () => {},
  };
  const kysely = new Kysely<never>({ dialect: new PostgresDialect({ pool }) });
  return { ...database, kysely: kysely as unknown as typeof database.kysely };
}

/** The plan of a recorded statement, its steps joined by `; `. */
export async function planOf(database: Database, statement: Pick<Statement, 'sql' | 'parameters'>): Promise<string> {
  if (database.dialect === 'sqlite') {
    const rows = database.sqlite.prepare(`EXPLAIN QUERY PLAN ${statement.sql}`).all(...statement.parameters) as { detail: string }[];
    return rows.map((r) => r.detail).join('; ');
  }
  const { rows } = await database.pool.query(`EXPLAIN ${statement.sql}`, [...statement.parameters]);
  return rows.map((r: { 'QUERY PLAN': string }) => r['QUERY PLAN'].trim()).join('; ');
}
