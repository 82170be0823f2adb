import type { Kysely } from 'kysely';

/**
 * The S3 archive's ledger: which object holds each archived item (an event from the log, or an
 * outbox row's version), recorded before the object is written, with the object's bytes kept until
 * S3 has it. An item is recorded once (its primary key), so no event lands in two objects whatever
 * replicas stall, stop or crash; an object recorded and not yet written is written again from its
 * bytes by whoever meets its items next: the same key, the same content.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable('archive_objects')
    .addColumn('key', 'text', (c) => c.primaryKey())
    // gzip NDJSON as base64 until written, then NULL.
    .addColumn('body', 'text')
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .addColumn('written_at', 'bigint')
    .execute();
  await db.schema
    .createTable('archive_items')
    .addColumn('item', 'text', (c) => c.primaryKey())
    .addColumn('object_key', 'text', (c) => c.notNull())
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .execute();
  await db.schema.createIndex('archive_items_created').on('archive_items').column('created_at').execute();
  await db.schema.createIndex('archive_objects_created').on('archive_objects').column('created_at').execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.dropTable('archive_items').execute();
  await db.schema.dropTable('archive_objects').execute();
}
