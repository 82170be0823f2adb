/**
 * What `boxrelay store copy` moves from SQLite to PostgreSQL: the ONE list the copy, its counts and
 * its completeness test (test/store-copy-tables.test.ts, which fails on a table named nowhere here)
 * are driven by. A new migration that adds a table adds it to COPIED or NOT_COPIED; a new column
 * needs nothing (the columns of the source table are copied).
 */

/** A count shown in the table at the end: the rows of a table, or of a part of it (`where` is SQL). */
export interface Kind {
  label: string;
  where?: string;
}

export interface CopiedTable {
  table: string;
  /** What the count table calls the rows (default: the table's name). */
  label?: string;
  /** The primary key: rows are read in its order, in batches, and written idempotently on it (so `--resume` duplicates nothing). */
  key: readonly string[];
  /** Columns written as NULL whatever the source holds. */
  cleared?: readonly string[];
  /** Counts shown beside the table's total. */
  kinds?: readonly Kind[];
}

export const COPIED: readonly CopiedTable[] = [
  { table: 'deliveries', label: 'deliveries (dedup history)', key: ['id'] },
  {
    table: 'outbox',
    label: 'fan-out rows',
    key: ['id'],
    // A lease belongs to a process of the old relay; the new one claims the work afresh.
    cleared: ['lease_owner', 'lease_until'],
    kinds: [
      { label: 'pending fan-out work', where: "status = 'pending'" },
      { label: 'dead letters', where: "status IN ('dead', 'set_aside')" },
      { label: 'delivered or discarded (kept for their status)', where: "status IN ('delivered', 'discarded')" },
    ],
  },
  { table: 'boxes', label: 'box states', key: ['id'], kinds: [{ label: 'boxes repaired by reconciliation', where: 'repaired_up_to IS NOT NULL' }] },
  { table: 'sink_state', label: 'sink states', key: ['sink'], kinds: [{ label: 'paused sinks', where: 'paused_at IS NOT NULL' }] },
  { table: 'relay_meta', label: 'relay facts (watch start, log deletions)', key: ['name'] },
  { table: 'reconcile_runs', label: 'reconciliation runs', key: ['id'] },
  { table: 'secrets', label: 'upstream secrets', key: ['id'] },
  { table: 'audit', label: 'audit entries', key: ['id'] },
  { table: 'sink_minutes', label: 'delivery counts per minute', key: ['minute', 'sink'] },
  { table: 'attempts', label: 'delivery attempts', key: ['id'] },
  { table: 'attempt_minutes', label: 'attempts per sink and minute (health)', key: ['sink', 'minute'] },
  { table: 'attempt_statuses', label: 'attempts per sink, minute and status (health)', key: ['sink', 'minute', 'status'] },
  // The S3 archive's ledger: which object holds each archived event, so none is archived twice after the move.
  { table: 'archive_objects', label: 'S3 archive objects', key: ['key'] },
  { table: 'archive_items', label: 'events in S3 archive objects', key: ['item'] },
  {
    table: 'log_cursors',
    label: 'log cursors (per sink and partition)',
    key: ['sink', 'part'],
    // Held by processes of the old relay; the new ones take the partitions afresh.
    cleared: ['lease_owner', 'lease_until'],
  },
];

/** Tables the relay keeps that are deliberately not copied, and why. */
export const NOT_COPIED: Readonly<Record<string, string>> = {
  leases: 'held by running processes; the new relay takes its own',
  heartbeat: "the readiness probe's scratch row",
  sink_servers: 'heartbeats of running replicas; the new relays announce their own sinks',
  log_readers: 'heartbeats of running log readers; the new relays announce their own',
  log_marks: "when the old relay's cursors passed each position: events delivered before the move show their cursor's last move instead",
  kysely_migration: 'each database records its own migrations',
  kysely_migration_lock: 'each database records its own migrations',
};
