import { sql, type Kysely } from 'kysely';

/**
 * Reconciliation (contract section 9): the watch start (a database that predates this migration
 * takes the migration's time), the lease that keeps runs one at a time across replicas, the run
 * reports, how far each box was repaired, and the origin of events that entered through a run.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable('relay_meta')
    .addColumn('name', 'text', (c) => c.primaryKey())
    .addColumn('value', 'text', (c) => c.notNull())
    .execute();
  await sql`INSERT INTO relay_meta (name, value) VALUES ('watch_start', ${new Date().toISOString()})`.execute(db);

  await db.schema
    .createTable('leases')
    .addColumn('name', 'text', (c) => c.primaryKey())
    .addColumn('holder', 'text', (c) => c.notNull())
    .addColumn('expires_at', 'bigint', (c) => c.notNull())
    .execute();

  await db.schema
    .createTable('reconcile_runs')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('started_at', 'bigint', (c) => c.notNull())
    .addColumn('finished_at', 'bigint')
    .addColumn('outcome', 'text')
    .addColumn('report', 'text', (c) => c.notNull())
    .execute();
  await db.schema.createIndex('reconcile_runs_started_at').on('reconcile_runs').column('started_at').execute();

  await db.schema.alterTable('boxes').addColumn('repaired_up_to', 'text').execute();
  await db.schema.alterTable('deliveries').addColumn('origin', 'text').execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable('deliveries').dropColumn('origin').execute();
  await db.schema.alterTable('boxes').dropColumn('repaired_up_to').execute();
  await db.schema.dropTable('reconcile_runs').execute();
  await db.schema.dropTable('leases').execute();
  await db.schema.dropTable('relay_meta').execute();
}
