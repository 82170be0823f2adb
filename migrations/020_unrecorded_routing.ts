import { DEFAULT_MIGRATION_TABLE, sql, type Kysely } from 'kysely';

/** The `relay_meta` row naming the deliveries whose routing was never stored, while any are left. */
export const UNRECORDED_ROUTING = 'unrecorded_routing';

/**
 * Releases before migration 009 deleted a fan-out row once its sink acknowledged it (the `done` rows
 * of earlier builds went with migration 007), and stored no routing (the `sinks` column came with
 * 012): they read "delivered" off the configuration's routing. An event they stored kept rows only
 * for the sinks still owing it, so its status listed nothing it had been delivered to. Only the relay
 * knows the routing, so this notes which deliveries lack it (received before migration 009 ran, as
 * the migration table recorded it), and the relay's next start writes their delivered rows
 * (src/store/exceptions/past-routing.ts). Deliveries since 009 have a row for every sink routed to.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  const { rows } = await sql<{ timestamp: string }>`SELECT timestamp FROM ${sql.table(DEFAULT_MIGRATION_TABLE)}
    WHERE name = '009_kept_outcomes'`.execute(db);
  const kept = rows[0];
  if (kept === undefined) return;
  const before = Date.parse(kept.timestamp);
  const { rows: unrecorded } = await sql`SELECT 1 FROM deliveries WHERE received_at < ${before} AND sinks IS NULL LIMIT 1`.execute(db);
  if (unrecorded.length === 0) return;
  await sql`INSERT INTO relay_meta (name, value) VALUES (${UNRECORDED_ROUTING}, ${JSON.stringify({ before })})`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DELETE FROM relay_meta WHERE name = ${UNRECORDED_ROUTING}`.execute(db);
}
