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
  const { prepare } = database;
  prepare('PRAGMA synchronous = NORMAL').run();
  try {
    const statement = prepare(sql);
    if (statement.reader) return statement.all(...parameters) as O[];
    statement.run(...parameters);
    return [];
  } finally {
    prepare(`PRAGMA synchronous = ${database.synchronous}`).run();
  }
}
