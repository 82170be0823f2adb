import { stat } from 'node:fs/promises';
import { sql } from 'kysely';
import { errorCodeOf } from '../../errors.js';
import type { Database } from './database.js';

/** A file's size; one not there (a WAL checkpointed away, or not yet written) takes no room. */
async function fileBytes(path: string): Promise<number> {
  try {
    return (await stat(path)).size;
  } catch (error) {
    if (errorCodeOf(error) === 'ENOENT') return 0;
    throw error;
  }
}

/**
 * The room the database takes: a SQLite file with its WAL (asked of the filesystem, off the
 * thread that answers webhooks), or PostgreSQL's whole database as the server counts it.
 */
export async function databaseBytes(database: Database, url: string): Promise<number> {
  if (database.dialect === 'postgres') {
    const { rows } = await sql<{ bytes: string }>`SELECT pg_database_size(current_database()) AS bytes`.execute(database.kysely);
    return Number(rows[0]!.bytes);
  }
  const [file, wal] = await Promise.all([fileBytes(url), fileBytes(`${url}-wal`)]);
  return file + wal;
}
