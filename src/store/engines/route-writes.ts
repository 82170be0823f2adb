import { Kysely, SqliteDialect, type CompiledQuery, type DatabaseConnection, type Driver, type QueryResult } from 'kysely';
import type { Schema } from '../schema.js';
import { NotTheWriterError } from './transactions.js';
import type { Database } from './database.js';
import { once, type SqliteWriter } from './sqlite-writes.js';

type SqliteDatabase = Extract<Database, { dialect: 'sqlite' }>;

/**
 * The connection as one that does not write: `PRAGMA query_only`, so a write that was not sent to
 * the writer fails loudly (SQLITE_READONLY) instead of taking the file's write lock; its Kysely
 * queries read here, and send every statement that writes to `writer`, answered after its commit
 * (which other connections then see: WAL). A transaction cannot span the two: a write that depends
 * on a read is one statement, a list for `runStatementTransaction`, or a `NamedTransaction` the
 * writer runs.
 */
export function routeWrites(database: SqliteDatabase, writer: SqliteWriter): SqliteDatabase {
  const { sqlite, prepare } = database;
  sqlite.pragma('query_only = ON');
  const connection: DatabaseConnection = {
    async executeQuery<R>(query: CompiledQuery): Promise<QueryResult<R>> {
      const statement = prepare(query.sql);
      if (statement.readonly) return { rows: (statement.reader ? statement.all(...query.parameters) : (statement.run(...query.parameters), [])) as R[] };
      const [result] = await writer.write([once(query)], 'synced');
      return statement.reader ? { rows: result!.rows as R[] } : { rows: [], numAffectedRows: BigInt(result!.changed) };
    },
    streamQuery() {
      throw new Error('queries are not streamed');
    },
  };
  const refused = async (): Promise<never> => {
    throw new NotTheWriterError();
  };
  const driver: Driver = {
    init: async () => {},
    acquireConnection: async () => connection,
    beginTransaction: refused,
    commitTransaction: refused,
    rollbackTransaction: refused,
    releaseConnection: async () => {},
    destroy: async () => void sqlite.close(),
  };
  class RoutedDialect extends SqliteDialect {
    override createDriver(): Driver {
      return driver;
    }
  }
  const kysely = new Kysely<Schema>({ dialect: new RoutedDialect({ database: sqlite }) });
  return { ...database, kysely, writer, close: () => kysely.destroy() };
}
