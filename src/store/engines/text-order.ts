import { sql } from 'kysely';
import type { Database } from './database.js';

/**
 * Whether the database orders text by its bytes, so that the keys starting with `p:` are exactly
 * those from `p:` up to `p;` and an index can count them as one range. SQLite's BINARY collation
 * does; on PostgreSQL the database's collation decides: C and POSIX (and the builtin provider) do,
 * a language's collation does not (it may skip punctuation), and there only a pattern finds them.
 */
export async function sortsTextBytewise(database: Database): Promise<boolean> {
  if (database.dialect === 'sqlite') return true;
  // datlocprovider exists from PostgreSQL 15; before it, every database used the C library's locales.
  const { rows } = await sql<{ collate: string; provider: string | null }>`
    SELECT datcollate AS collate, to_jsonb(d) ->> 'datlocprovider' AS provider FROM pg_database d WHERE datname = current_database()`.execute(database.kysely);
  const row = rows[0];
  if (row === undefined) return false;
  if (row.provider === 'b') return true;
  return (row.provider === null || row.provider === 'c') && /^(C|POSIX)($|\.)/i.test(row.collate);
}

/** `sortsTextBytewise`, asked once: the database's collation does not change while the relay runs (asked again after a failure). */
export function textOrderOnce(database: Database): () => Promise<boolean> {
  let bytewise: Promise<boolean> | undefined;
  return () =>
    (bytewise ??= sortsTextBytewise(database).catch((error: unknown) => {
      bytewise = undefined;
      throw error;
    }));
}
