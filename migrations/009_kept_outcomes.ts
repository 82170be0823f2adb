import { sql, type Kysely } from 'kysely';

/**
 * True delivery statuses (contract section 6): outbox rows stay after they are settled, as
 * `delivered` or `discarded`, until retention removes them with their delivery. Work set aside for a
 * sink no longer configured gets a status of its own (it was a `dead` row with that last error), and
 * the dead letter index covers both, as the listing does. `sink_servers` holds which sinks the
 * replicas serve, so a rolling update leaves a peer's work alone. The hot lookups keep to partial
 * indexes on `pending`, so kept rows cost claims nothing.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`UPDATE outbox SET status = 'set_aside' WHERE status = 'dead' AND last_error = 'sink not configured'`.execute(db);
  await db.schema.dropIndex('outbox_dead').execute();
  await db.schema
    .createIndex('outbox_dead_letters')
    .on('outbox')
    .columns(['sink', 'id'])
    .where(sql<boolean>`status IN ('dead', 'set_aside')`)
    .execute();
  await db.schema
    .createTable('sink_servers')
    .addColumn('sink', 'text', (c) => c.primaryKey())
    .addColumn('served_at', 'bigint', (c) => c.notNull())
    .execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.dropTable('sink_servers').execute();
  await db.schema.dropIndex('outbox_dead_letters').execute();
  await sql`DELETE FROM outbox WHERE status IN ('delivered', 'discarded')`.execute(db);
  await sql`UPDATE outbox SET status = 'dead' WHERE status = 'set_aside'`.execute(db);
  await db.schema
    .createIndex('outbox_dead')
    .on('outbox')
    .columns(['sink', 'id'])
    .where(sql.ref('status'), '=', 'dead')
    .execute();
}
