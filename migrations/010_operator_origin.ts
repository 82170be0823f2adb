import { sql, type Kysely } from 'kysely';

/**
 * Operator events are now told apart by their stored origin, not their type. Those stored before
 * (origin NULL, type `boxrelay.…`) were written by the relay itself, or treated as its own when
 * received, so they keep going out as operator events: their pending fan-out work is unchanged.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`UPDATE deliveries SET origin = 'operator' WHERE origin IS NULL AND type LIKE 'boxrelay.%'`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`UPDATE deliveries SET origin = NULL WHERE origin = 'operator'`.execute(db);
}
