import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import BetterSqlite3 from 'better-sqlite3';
import { Kysely, SqliteDialect } from 'kysely';
import pg from 'pg';
import type { Config } from '../../config/schema.js';
import { describeError, RelayError } from '../../errors.js';
import type { Schema } from '../schema.js';
import { RelayPostgresDialect } from './schema-introspector.js';
import type { SqliteWriter } from './sqlite-writes.js';
import { statementCache } from './statement-cache.js';

export interface DatabaseOptions {
  /** A SQLite file path, or a `postgres://` / `postgresql://` URL. */
  url: string;
  sqliteSynchronous?: 'FULL' | 'EXTRA' | 'NORMAL';
  busyTimeoutMs?: number;
  /** PostgreSQL: the longest wait for a connection, a free pool slot, or one statement's answer (unset: unbounded, for migrations). */
  timeoutMs?: number;
  /** PostgreSQL: connections in the pool. */
  poolSize?: number;
  /** PostgreSQL: queries waiting for a pool slot beyond which a query is refused at once. */
  maxWaiting?: number;
  /** PostgreSQL: a connection failed outside a query (e.g. the server restarted); the next query fails and reconnects. */
  onConnectionError?: (error: Error) => void;
}

const DEFAULT_POOL_SIZE = 10;

/** The database settings of the configuration, as `serve` and every command open it. */
export function databaseOptionsOf(
  config: Pick<Config, 'database' | 'sqliteSynchronous' | 'busyTimeoutMs' | 'databaseTimeoutMs' | 'databasePoolSize' | 'databaseMaxWaiting'>,
): DatabaseOptions {
  return {
    url: config.database,
    sqliteSynchronous: config.sqliteSynchronous,
    busyTimeoutMs: config.busyTimeoutMs,
    timeoutMs: config.databaseTimeoutMs,
    poolSize: config.databasePoolSize,
    maxWaiting: config.databaseMaxWaiting,
  };
}

/**
 * PostgreSQL with the fan-out in its worker thread: the worker has a pool of its own (so its queries
 * are not written and read on the thread that answers webhooks), taken out of `poolSize`, so a replica
 * opens no more connections than the setting says.
 */
export function splitPool(options: DatabaseOptions): { receiver: DatabaseOptions; fanout: DatabaseOptions } {
  const poolSize = options.poolSize ?? DEFAULT_POOL_SIZE;
  const fanout = Math.max(1, Math.floor(poolSize / 2));
  return { receiver: { ...options, poolSize: Math.max(1, poolSize - fanout) }, fanout: { ...options, poolSize: fanout } };
}

/** Refused at once rather than queued: every pool slot is taken and enough queries already wait. */
export class DatabaseBusyError extends RelayError {
  readonly code = 'database_busy';
  constructor(waiting: number) {
    super(`${waiting} queries already wait for a database connection`);
  }
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
      /**
       * Set when this connection does not write (`PRAGMA query_only`): its writes go to the thread that
       * owns the file's write connection (`routeWrites`). Unset: it writes itself.
       */
      writer?: SqliteWriter;
      close(): Promise<void>;
    }
  | {
      dialect: 'postgres';
      kysely: Kysely<Schema>;
      pool: pg.Pool;
      /** A pooled client under the same bounds as Kysely's (refused at once beyond the waiting limit), for statements prepared by name. */
      connect(): Promise<pg.PoolClient>;
      /**
       * The connection of one background role, outside the pool the requests share: the deliveries'
       * group commit never waits behind (or is refused for) the admin API's or the fan-out's queries,
       * and the log's sequencer never takes their place. Each role's calls get the same connection, in turn.
       */
      connectOwn(role: OwnConnection): Promise<pg.PoolClient>;
      close(): Promise<void>;
    };

/** The roles with a PostgreSQL connection of their own (`connectOwn`): one each per process, beside the pool. */
export type OwnConnection = 'writer' | 'sequencer';

export function isPostgresUrl(url: string): boolean {
  return /^postgres(ql)?:\/\//.test(url);
}

/** A SQLite database in a file: other connections (threads, processes) can open it too; `:memory:` is one connection's own. */
export function isSqliteFile(url: string): boolean {
  return !isPostgresUrl(url) && url !== ':memory:';
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
export class DatabaseOpenError extends RelayError {
  readonly code = 'database_unavailable';
  constructor(url: string, cause: unknown) {
    super(`cannot open the database (BOXRELAY_DATABASE: ${databaseLocation(url)}): ${describeError(cause)}`, { cause });
  }
}

const INT8_OID = 20;

export function openDatabase(options: DatabaseOptions): Database {
  const { url, sqliteSynchronous = 'FULL', busyTimeoutMs = 5000 } = options;
  if (isPostgresUrl(url)) return openPostgres(options);

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

/**
 * Every wait is bounded, so a database that is down or stops answering costs a request a few
 * seconds at most: the connect and a free slot (connectionTimeoutMillis), each statement (the
 * client's query_timeout, as the server cannot enforce anything while frozen; statement_timeout
 * and idle_in_transaction_session_timeout on the server side), and the queue of waiting queries.
 */
function openPostgres({ url, timeoutMs, poolSize = DEFAULT_POOL_SIZE, maxWaiting = 100, onConnectionError = () => {} }: DatabaseOptions): Database {
  const timeouts = timeoutMs && {
    connectionTimeoutMillis: timeoutMs,
    query_timeout: timeoutMs,
    statement_timeout: timeoutMs,
    idle_in_transaction_session_timeout: 2 * timeoutMs,
  };
  const poolOf = (max: number): pg.Pool => {
    const pool = new pg.Pool({
      connectionString: url,
      max,
      ...timeouts,
      // Epoch-millisecond columns are BIGINT; they fit a JS number, so read them as numbers.
      types: {
        getTypeParser: ((oid: number, format?: 'text' | 'binary') =>
          oid === INT8_OID ? (value: string) => Number(value) : pg.types.getTypeParser(oid, format)) as never,
      },
    });
    // Without these, a restart of the server ("terminating connection due to administrator command")
    // is an unhandled 'error' event that ends the process: the pool's for idle clients, the client's
    // own for one checked out (Kysely listens to neither).
    pool.on('error', onConnectionError);
    pool.on('connect', (client) => watchClient(client, onConnectionError));
    return pool;
  };
  const pool = poolOf(poolSize);
  const own = new Map<OwnConnection, pg.Pool>();
  const bounded = {
    async connect() {
      if (pool.waitingCount >= maxWaiting) throw new DatabaseBusyError(pool.waitingCount);
      return releasedOnce(await pool.connect());
    },
    end: () => pool.end(),
  };
  const kysely = new Kysely<Schema>({ dialect: new RelayPostgresDialect({ pool: bounded }) });
  return {
    dialect: 'postgres',
    kysely,
    pool,
    connect: bounded.connect,
    connectOwn: async (role) => {
      let ownPool = own.get(role);
      if (!ownPool) own.set(role, (ownPool = poolOf(1)));
      return releasedOnce(await ownPool.connect());
    },
    close: async () => {
      await kysely.destroy();
      const ownPools = [...own.values()];
      own.clear();
      await Promise.all(ownPools.map((ownPool) => ownPool.end()));
    },
  };
}

/**
 * A pooled client's errors go to `onConnectionError`, and one whose statement failed other than by
 * the server's answer (a timeout, a lost socket) is dropped.
 */
function watchClient(client: pg.PoolClient, onConnectionError: (error: Error) => void): void {
  client.on('error', onConnectionError);
  const query = client.query.bind(client) as (...args: unknown[]) => unknown;
  // A statement that timed out on the client may still be running on the server: the connection
  // is closed, so its transaction ends there and the next checkout gets a fresh connection.
  client.query = ((...args: unknown[]) => {
    const result = query(...args);
    if (result instanceof Promise) {
      result.catch((error: unknown) => {
        if (!(error instanceof pg.DatabaseError)) dropConnection(client);
      });
    }
    return result;
  }) as typeof client.query;
}

/** A dropped connection (`dropConnection`) is released already: the later release by its user does nothing. */
function releasedOnce(client: pg.PoolClient): pg.PoolClient {
  const release = client.release;
  let released = false;
  client.release = (destroy) => {
    if (released) return;
    released = true;
    release(destroy);
  };
  return client;
}

/** Releases the client as broken: the pool closes it (its socket at once when a query still hangs on it) and never lends it again. */
function dropConnection(client: pg.PoolClient): void {
  client.release(true);
}
