import { PostgresAdapter, type Kysely } from 'kysely';

/**
 * Contract section 15. `audit`: one row per operator change (admin API or CLI), written in the
 * change's own transaction; listed newest first (by id) and pruned by `at`. `sink_minutes`: per sink
 * and UTC minute, the deliveries a sink acknowledged and the failed attempts, which the outbox does
 * not keep (a delivered row is deleted); one upsert per batch of settled attempts, not per event.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  const postgres = db.getExecutor().adapter instanceof PostgresAdapter;
  await db.schema
    .createTable('audit')
    .addColumn('id', postgres ? 'bigserial' : 'integer', (c) => (postgres ? c.primaryKey() : c.primaryKey().autoIncrement()))
    .addColumn('at', 'bigint', (c) => c.notNull())
    .addColumn('action', 'text', (c) => c.notNull())
    .addColumn('target', 'text')
    .addColumn('by', 'text', (c) => c.notNull())
    .addColumn('detail', 'text', (c) => c.notNull())
    // The event a retry or discard of one dead letter touched, so an event's view can list them.
    .addColumn('event_id', 'text')
    .execute();
  await db.schema.createIndex('audit_at').on('audit').column('at').execute();
  await db.schema.createIndex('audit_action').on('audit').columns(['action', 'id']).execute();
  await db.schema.createIndex('audit_target').on('audit').columns(['target', 'id']).execute();
  await db.schema.createIndex('audit_event_id').on('audit').columns(['event_id', 'id']).execute();

  await db.schema
    .createTable('sink_minutes')
    .addColumn('sink', 'text', (c) => c.notNull())
    /** Epoch ms of the minute's start (UTC). */
    .addColumn('minute', 'bigint', (c) => c.notNull())
    .addColumn('delivered', 'bigint', (c) => c.notNull())
    .addColumn('failed', 'bigint', (c) => c.notNull())
    .addPrimaryKeyConstraint('sink_minutes_pk', ['minute', 'sink'])
    .execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.dropTable('sink_minutes').execute();
  await db.schema.dropTable('audit').execute();
}
