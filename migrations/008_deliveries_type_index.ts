import type { Kysely } from 'kysely';

/**
 * The admin API lists events by type (`?type=`). Without an index that page is a scan of the whole
 * history: 8 s with 10 million deliveries stored, on SQLite a stall of the receive path too. With
 * five-odd types the index takes its inserts at a few hot pages, so ingest pays little for it.
 * Building it on a large existing table takes a while (some 25 s for 10 million rows on SQLite).
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.createIndex('deliveries_type').on('deliveries').columns(['type', 'received_at']).execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.dropIndex('deliveries_type').execute();
}
