import { PostgresAdapter, sql, type Kysely } from 'kysely';

/**
 * A lane stores its cursors up to a hundred times a second. With `seq` indexed, every move was a new
 * row version with new index entries (on PostgreSQL not a HOT update), which only VACUUM removes: with
 * autovacuum off or behind, a table of 48 cursors held 1.6 million dead versions (66 MB) after 14
 * minutes beside 100 deliveries/s, and every statement that reads the cursors (retention's check of
 * pending work, the head, the lanes' own moves) slowed with it. Unindexed, a move on PostgreSQL is a
 * HOT update, whose dead versions any later read of the page prunes; on PostgreSQL the table also
 * keeps half of each page free, so moves stay on their page. No query needs the index: the table
 * holds 16 rows a sink.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.dropIndex('log_cursors_position').execute();
  if (db.getExecutor().adapter instanceof PostgresAdapter) await sql`ALTER TABLE log_cursors SET (fillfactor = 50)`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  if (db.getExecutor().adapter instanceof PostgresAdapter) await sql`ALTER TABLE log_cursors RESET (fillfactor)`.execute(db);
  await db.schema.createIndex('log_cursors_position').on('log_cursors').column('seq').execute();
}
