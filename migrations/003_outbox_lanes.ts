import { sql, type Kysely } from 'kysely';

/**
 * The dispatcher claims due work per sink (one lane each) in due order, and asks each lane's next
 * due time: one partial index on (sink, next_attempt_at, id) serves both, and the counts by sink.
 * It supersedes the sink-less `outbox_pending` index, which would make every claim sort the backlog.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.dropIndex('outbox_pending').execute();
  await db.schema
    .createIndex('outbox_due')
    .on('outbox')
    .columns(['sink', 'next_attempt_at', 'id'])
    .where(sql.ref('status'), '=', 'pending')
    .execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.dropIndex('outbox_due').execute();
  await db.schema
    .createIndex('outbox_pending')
    .on('outbox')
    .columns(['next_attempt_at', 'id'])
    .where(sql.ref('status'), '=', 'pending')
    .execute();
}
