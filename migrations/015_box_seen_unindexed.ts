import type { Kysely } from 'kysely';

/**
 * What each index of a stored delivery serves (docs/performance.md, "The B-trees of a stored delivery"):
 *   deliveries (primary key id)       the dedup insert, events by id, retention's deletes, replay and claims by id
 *   deliveries_received_at            /admin/events newest first and ?since=, retention's expired batch, replay windows
 *   deliveries_box_id                 /admin/events?boxId=, retention's pending check of a box
 *   deliveries_type                   /admin/events?type=, /admin/stats accepted counts
 *   deliveries_log                    the fan-out's log reads, the log head, backlog counts, set-aside
 *   deliveries_unsequenced (PG)       the sequencer's queue
 *   boxes (primary key id)            the upsert, /admin/boxes pages, reconciliation, retention's pass
 *   boxes_state                       /admin/boxes?state=, the boxes gauge
 * `boxes_last_seen_at` served only retention's daily pass over the boxes, yet every stored event moved
 * its entry (and on PostgreSQL kept the box upsert from being a HOT update): the pass now reads the
 * boxes in id order instead. Dropping an index rewrites no table: quick on a large database.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.dropIndex('boxes_last_seen_at').execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.createIndex('boxes_last_seen_at').on('boxes').column('last_seen_at').execute();
}
