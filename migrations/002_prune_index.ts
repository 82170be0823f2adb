import { sql, type Kysely } from 'kysely';

/**
 * Retention deletes finished fan-out rows by age. Without this index each pruning batch would scan
 * the whole outbox (on SQLite synchronously, stalling the receiver); partial, so it holds only done rows.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createIndex('outbox_done_created_at')
    .on('outbox')
    .column('created_at')
    .where(sql.ref('status'), '=', 'done')
    .execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.dropIndex('outbox_done_created_at').execute();
}
