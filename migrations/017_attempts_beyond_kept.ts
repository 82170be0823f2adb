import { sql, type Kysely } from 'kysely';

/**
 * The attempts numbered past the 50 kept per event and sink (contract section 16): retention's trim
 * finds the few events and sinks that have them here, instead of reading every attempt. Partial, so
 * it holds only such rows (an event and sink resent again and again), and costs the writes of all
 * other attempts nothing. The literal matches `BEYOND_KEPT` in src/store/attempts/prune-attempts.ts.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.createIndex('attempts_beyond_kept').on('attempts').columns(['event_id', 'sink', 'n']).where(sql<boolean>`n > 50`).execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.dropIndex('attempts_beyond_kept').execute();
}
