import type { Kysely } from 'kysely';

/**
 * Fencing epochs (docs/architecture.md, "Who may act"). `log_cursors.epoch` grows each time a
 * partition is taken by a holder, and every write a holder makes for it (a cursor move, an outbox
 * row) names the epoch it holds: a late write of a holder that stalled or stopped changes nothing.
 * `sink_state.epoch` grows with every pause and resume; each lane acknowledges the epoch it has
 * taken in its reader row (`log_readers.seen_epoch`, with the lane's lease), and a pause is answered
 * once every live lane has acknowledged it or its lease has ended, not after a wait on a clock.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable('log_cursors').addColumn('epoch', 'bigint', (c) => c.notNull().defaultTo(0)).execute();
  await db.schema.alterTable('sink_state').addColumn('epoch', 'bigint', (c) => c.notNull().defaultTo(0)).execute();
  await db.schema.alterTable('log_readers').addColumn('seen_epoch', 'bigint', (c) => c.notNull().defaultTo(0)).execute();
  await db.schema.alterTable('log_readers').addColumn('lease_until', 'bigint').execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable('log_readers').dropColumn('lease_until').execute();
  await db.schema.alterTable('log_readers').dropColumn('seen_epoch').execute();
  await db.schema.alterTable('sink_state').dropColumn('epoch').execute();
  await db.schema.alterTable('log_cursors').dropColumn('epoch').execute();
}
