import type { Kysely } from 'kysely';

/**
 * Reconciliation and `boxrelay upstream` per account (contract section 21): each run report and each
 * secret the upstream issued belongs to one account, so that an account's reports, its one run at a
 * time and the secrets its endpoint accepts are its own. Everything stored before belongs to
 * `default`. A column with a constant default rewrites no table on either engine.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable('reconcile_runs').addColumn('account', 'text', (c) => c.notNull().defaultTo('default')).execute();
  await db.schema.alterTable('secrets').addColumn('account', 'text', (c) => c.notNull().defaultTo('default')).execute();
  // An account's last run and last success; retention's cutoff keeps the index on started_at alone.
  await db.schema.createIndex('reconcile_runs_account').on('reconcile_runs').columns(['account', 'started_at']).execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.dropIndex('reconcile_runs_account').execute();
  await db.schema.alterTable('secrets').dropColumn('account').execute();
  await db.schema.alterTable('reconcile_runs').dropColumn('account').execute();
}
