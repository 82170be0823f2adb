import { PostgresAdapter, sql, type Kysely } from 'kysely';

/** Written once for both engines; only the auto-increment column type differs. */
export async function up(db: Kysely<unknown>): Promise<void> {
  const postgres = db.getExecutor().adapter instanceof PostgresAdapter;
  const serialId = postgres ? 'bigserial' : 'integer';

  await db.schema
    .createTable('deliveries')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('type', 'text', (c) => c.notNull())
    .addColumn('box_id', 'text')
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('received_at', 'bigint', (c) => c.notNull())
    .addColumn('attempt', 'integer')
    .addColumn('payload', 'text', (c) => c.notNull())
    .execute();
  await db.schema.createIndex('deliveries_received_at').on('deliveries').column('received_at').execute();
  await db.schema.createIndex('deliveries_box_id').on('deliveries').columns(['box_id', 'received_at']).execute();

  await db.schema
    .createTable('outbox')
    .addColumn('id', serialId, (c) => (postgres ? c.primaryKey() : c.primaryKey().autoIncrement()))
    .addColumn('delivery_id', 'text', (c) => c.notNull())
    .addColumn('sink', 'text', (c) => c.notNull())
    .addColumn('status', 'text', (c) => c.notNull())
    .addColumn('attempts', 'integer', (c) => c.notNull().defaultTo(0))
    .addColumn('next_attempt_at', 'bigint', (c) => c.notNull())
    .addColumn('last_error', 'text')
    .addColumn('lease_owner', 'text')
    .addColumn('lease_until', 'bigint')
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .addColumn('updated_at', 'bigint', (c) => c.notNull())
    .execute();
  // Partial indexes keep the hot lookups small however much finished work is kept.
  await db.schema
    .createIndex('outbox_pending')
    .on('outbox')
    .columns(['next_attempt_at', 'id'])
    .where(sql.ref('status'), '=', 'pending')
    .execute();
  await db.schema
    .createIndex('outbox_dead')
    .on('outbox')
    .columns(['sink', 'id'])
    .where(sql.ref('status'), '=', 'dead')
    .execute();
  await db.schema.createIndex('outbox_delivery').on('outbox').column('delivery_id').execute();

  await db.schema
    .createTable('boxes')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('name', 'text')
    .addColumn('state', 'text')
    .addColumn('previous_state', 'text')
    .addColumn('state_changed_at', 'text')
    .addColumn('last_event_id', 'text')
    .addColumn('hydrated_at', 'text')
    .addColumn('last_seen_at', 'bigint', (c) => c.notNull())
    .execute();
  await db.schema.createIndex('boxes_state').on('boxes').columns(['state', 'id']).execute();
  await db.schema.createIndex('boxes_last_seen_at').on('boxes').column('last_seen_at').execute();

  await db.schema
    .createTable('secrets')
    .addColumn('id', serialId, (c) => (postgres ? c.primaryKey() : c.primaryKey().autoIncrement()))
    .addColumn('secret', 'text', (c) => c.notNull())
    .addColumn('webhook_id', 'text')
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .addColumn('expires_at', 'bigint')
    .execute();

  await db.schema
    .createTable('heartbeat')
    .addColumn('id', 'integer', (c) => c.primaryKey())
    .addColumn('beat_at', 'bigint', (c) => c.notNull())
    .execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  for (const table of ['heartbeat', 'secrets', 'boxes', 'outbox', 'deliveries']) {
    await db.schema.dropTable(table).execute();
  }
}
