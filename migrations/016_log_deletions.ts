import { PostgresAdapter, sql, type Kysely } from 'kysely';

/** The tables whose deletions a kept backlog count cannot follow: the log and its outbox rows. */
const TABLES = ['deliveries', 'outbox'];

/**
 * How many statements deleted deliveries or outbox rows (`relay_meta` `log_deletions`), counted by
 * the database in the deleting transaction itself: a backlog count kept in any process holds only
 * while nothing it counted is gone, whichever process deleted it and however that process ended.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  const postgres = db.getExecutor().adapter instanceof PostgresAdapter;
  await sql`INSERT INTO relay_meta (name, value) VALUES ('log_deletions', '0')`.execute(db);
  if (postgres) {
    await sql`CREATE FUNCTION boxrelay_log_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF EXISTS (SELECT 1 FROM gone) THEN
          UPDATE relay_meta SET value = (value::bigint + 1)::text WHERE name = 'log_deletions';
        END IF;
        RETURN NULL;
      END $$`.execute(db);
  }
  for (const table of TABLES) {
    const trigger = sql.raw(`${table}_deleted`);
    await (postgres
      ? sql`CREATE TRIGGER ${trigger} AFTER DELETE ON ${sql.table(table)} REFERENCING OLD TABLE AS gone
          FOR EACH STATEMENT EXECUTE FUNCTION boxrelay_log_deleted()`
      : sql`CREATE TRIGGER ${trigger} AFTER DELETE ON ${sql.table(table)}
          BEGIN UPDATE relay_meta SET value = CAST(value AS INTEGER) + 1 WHERE name = 'log_deletions'; END`
    ).execute(db);
  }
}

export async function down(db: Kysely<unknown>): Promise<void> {
  const postgres = db.getExecutor().adapter instanceof PostgresAdapter;
  for (const table of TABLES) {
    await sql`DROP TRIGGER ${sql.raw(`${table}_deleted`)}${postgres ? sql` ON ${sql.table(table)}` : sql``}`.execute(db);
  }
  if (postgres) await sql`DROP FUNCTION boxrelay_log_deleted()`.execute(db);
  await sql`DELETE FROM relay_meta WHERE name = 'log_deletions'`.execute(db);
}
