import { sql, type Kysely } from 'kysely';

/**
 * One live row (pending, dead or set aside) per event and sink: a resend, a replay or a dead-letter
 * retry reopens that row instead of adding one beside it, so "retry all" never turns two rows of one
 * event pending at once. Duplicates left by earlier versions are merged first: a dead or set-aside
 * row goes when its event has a pending row for the sink, or a newer row of it (whose status the
 * event reads). `version` counts the reopenings: an attempt under way settles its row only while
 * it still has the version it claimed, so a resend made meanwhile sends the event again.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable('outbox').addColumn('version', 'integer', (c) => c.notNull().defaultTo(0)).execute();
  await sql`DELETE FROM outbox WHERE status IN ('dead', 'set_aside') AND EXISTS (SELECT 1 FROM outbox o
    WHERE o.delivery_id = outbox.delivery_id AND o.sink = outbox.sink AND o.id <> outbox.id
      AND (o.status = 'pending' OR o.id > outbox.id))`.execute(db);
  await db.schema.dropIndex('outbox_open').execute();
  await db.schema
    .createIndex('outbox_live')
    .unique()
    .on('outbox')
    .columns(['delivery_id', 'sink'])
    .where(sql<boolean>`status IN ('pending', 'dead', 'set_aside')`)
    .execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.dropIndex('outbox_live').execute();
  await db.schema
    .createIndex('outbox_open')
    .unique()
    .on('outbox')
    .columns(['delivery_id', 'sink'])
    .where(sql.ref('status'), '=', 'pending')
    .execute();
  await db.schema.alterTable('outbox').dropColumn('version').execute();
}
