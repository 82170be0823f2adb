import type { Kysely } from 'kysely';

/**
 * Tracing (contract section 11): each fan-out row keeps the W3C `traceparent` of the span that
 * stored it, so its attempts join that trace after a restart or on another replica.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable('outbox').addColumn('trace_parent', 'text').execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable('outbox').dropColumn('trace_parent').execute();
}
