import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import BetterSqlite3 from 'better-sqlite3';
import { Kysely, PostgresDialect, SqliteDialect } from 'kysely';
import pg from 'pg';
import type { Config } from '../config/schema.js';
import type { Schema } from './schema.js';
import { statementCache } from './statement-cache.js';

export interface DatabaseOptions {
  /** A SQLite file path, or a `postgres://` / `postgresql://` URL. */
  url: string;
  sqliteSynchronous?: 'FULL' | 'EXTRA' | 'NORMAL';
  busyTimeoutMs?: number;
}

/** The database settings of the configuration, as `serve` and every command open it. */
export function databaseOptionsOf(config: Pick<Config, 'database' | 'sqliteSynchronous' | 'busyTimeoutMs'>): DatabaseOptions {
  return { url: config.database, sqliteSynchronous: config.sqliteSynchronous, busyTimeoutMs: config.busyTimeoutMs };
}

export type Database =
  | {
      dialect: 'sqlite';
      kysely: Kysely<Schema>;
      sqlite: BetterSqlite3.Database;
      /** Prepares once per SQL text (Kysely's queries go through it too). */
      prepare(sql: string): BetterSqlite3.Statement;
      /** The configured commit durability, which unsynced writes put back. */
      synchronous: 'FULL' | 'EXTRA' | 'NORMAL';
      close(): Promise<void>;
    }
  | { dialect: 'postgres'; kysely: Kysely<Schema>; pool: pg.Pool; close(): Promise<void> };

export function isPostgresUrl(url: string): boolean {
  return /^postgres(ql)?:\/\//.test(url);
}

/** Where BOXRELAY_DATABASE points, for messages: the file, or host:port/database (never the credentials). */
export function databaseLocation(url: string): string {
  if (!isPostgresUrl(url)) return url;
  try {
    const parsed = new URL(url);
    return `PostgreSQL at ${parsed.hostname}:${parsed.port || '5432'}${parsed.pathname}`;
  } catch {
    return 'PostgreSQL at a URL that does not parse';
  }
}

/** The database could not be opened or reached (a missing directory, a refused connection, a wrong password). */
export class DatabaseOpenError extends Error {
  readonly code = 'database_unavailable';
  constructor(url: string, cause: unknown) {
    super(`cannot open the database (BOXRELAY_DATABASE: ${databaseLocation(url)}): ${(cause as Error).message}`, { cause });
  }
}

const INT8_OID = 20;

export function openDatabase({ url, sqliteSynchronous = 'FULL', busyTimeoutMs = 5000 }: DatabaseOptions): Database {
  if (isPostgresUrl(url)) {
    const pool = new pg.Pool({
      connectionString: url,
      // Epoch-millisecond columns are BIGINT; they fit a JS number, so read them as numbers.
      types: {
        getTypeParser: ((oid: number, format?: 'text' | 'binary') =>
          oid === INT8_OID ? (value: string) => Number(value) : pg.types.getTypeParser(oid, format)) as never,
      },
    });
    const kysely = new Kysely<Schema>({ dialect: new PostgresDialect({ pool }) });
    return { dialect: 'postgres', kysely, pool, close: () => kysely.destroy() };
  }

  if (url !== ':memory:') mkdirSync(dirname(url), { recursive: true });
  const sqlite = new BetterSqlite3(url);
  // WAL lets readers run beside the writer; synchronous=FULL makes every commit survive power loss.
  sqlite.pragma('journal_mode = WAL');
  sqlite.pragma(`synchronous = ${sqliteSynchronous}`);
  sqlite.pragma(`busy_timeout = ${Math.trunc(busyTimeoutMs)}`);
  const prepare = statementCache(sqlite);
  const kysely = new Kysely<Schema>({ dialect: new SqliteDialect({ database: { prepare, close: () => sqlite.close() } }) });
  return { dialect: 'sqlite', kysely, sqlite, prepare, synchronous: sqliteSynchronous, close: () => kysely.destroy() };
}
