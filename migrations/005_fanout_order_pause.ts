import { sql, type Kysely } from 'kysely';

/**
 * Per-box ordering and pausing (contract section 5). Each outbox row carries its event's box id, so
 * a claim can skip a box that has an earlier row pending for the sink; `sink_state` holds, per sink
 * and shared by replicas, since when it has failed every attempt and whether it is paused.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable('outbox').addColumn('box_id', 'text').execute();
  await sql`UPDATE outbox SET box_id = (SELECT box_id FROM deliveries WHERE deliveries.id = outbox.delivery_id)`.execute(db);
  await db.schema
    .createIndex('outbox_box_order')
    .on('outbox')
    .columns(['sink', 'box_id', 'id'])
    .where(sql.ref('status'), '=', 'pending')
    .execute();

  await db.schema
    .createTable('sink_state')
    .addColumn('sink', 'text', (c) => c.primaryKey())
    .addColumn('failing_since', 'bigint')
    .addColumn('paused_at', 'bigint')
    .addColumn('paused_by', 'text')
    .addColumn('next_probe_at', 'bigint')
    .execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.dropTable('sink_state').execute();
  await db.schema.dropIndex('outbox_box_order').execute();
  await db.schema.alterTable('outbox').dropColumn('box_id').execute();
}
