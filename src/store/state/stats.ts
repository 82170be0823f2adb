import { sql, type Kysely } from 'kysely';
import { OPERATOR_EVENT_PREFIX } from '../../events/parse-event.js';
import type { Database } from '../engines/database.js';
import type { Schema, SinkMinutesTable } from '../schema.js';
import { executeUnsynced } from '../engines/unsynced.js';

export const MINUTE_MS = 60_000;

/** One bucket of `GET /admin/stats` (contract section 15). */
export interface StatsBucket {
  start: string;
  accepted: Record<string, number>;
  delivered: Record<string, number>;
  failed: Record<string, number>;
}

export interface StatsWindow {
  /** Epoch ms of the first bucket's start, aligned to `bucketMs`. */
  from: number;
  bucketMs: number;
  /** How many buckets, the last one holding `now`. */
  count: number;
}

/** The buckets from the one holding `since` to the one holding `now`, aligned to the bucket size in UTC. */
export function statsWindow(since: number, now: number, bucketMs: number): StatsWindow {
  const from = Math.floor(since / bucketMs) * bucketMs;
  return { from, bucketMs, count: Math.max(0, Math.floor(now / bucketMs) - from / bucketMs + 1) };
}

type Counts = { name: string; n: number; count: number }[];

// CAST: better-sqlite3 binds a JS number as REAL (a division would give a fraction), and PostgreSQL
// would take an untyped epoch-ms parameter beside an integer for a 32-bit one.

/**
 * Received events per type and bucket: a walk over the few distinct types of the (type, received_at)
 * index, then for each type and bucket a count over that bucket's range of the index (covering).
 * Only the window's index entries are read, and nothing is sorted (a GROUP BY over the window
 * would sort every one of its rows: 350,000 a day at 4 events/s). Empty buckets answer 0 (left out
 * by the caller: a filter on the count here would count twice). Operator events (`boxrelay.*`) are
 * the relay's own, not received.
 */
export async function acceptedCounts(db: Kysely<Schema>, { from, bucketMs, count }: StatsWindow) {
  const start = sql`CAST(${from} AS BIGINT)`;
  const size = sql`CAST(${bucketMs} AS BIGINT)`;
  const { rows } = await sql<{ name: string; n: number; count: number }>`
    WITH RECURSIVE t(type) AS (
      SELECT min(type) FROM deliveries
      UNION ALL SELECT (SELECT min(type) FROM deliveries WHERE type > t.type) FROM t WHERE t.type IS NOT NULL
    ), b(n) AS (
      SELECT 0 UNION ALL SELECT n + 1 FROM b WHERE n + 1 < ${count}
    )
    SELECT t.type AS name, b.n AS n, (
      SELECT count(*) FROM deliveries AS d
      WHERE d.type = t.type AND d.received_at >= ${start} + b.n * ${size} AND d.received_at < ${start} + (b.n + 1) * ${size}
    ) AS count
    FROM t CROSS JOIN b
    WHERE t.type IS NOT NULL AND t.type NOT LIKE ${`${OPERATOR_EVENT_PREFIX}%`}`.execute(db);
  return rows;
}

/** Deliveries and failed attempts per sink and bucket, from the per-minute counters (their primary key leads with the minute). */
export async function sinkCounts(db: Kysely<Schema>, { from, bucketMs, count }: StatsWindow) {
  const to = from + count * bucketMs;
  const { rows } = await sql<{ name: string; n: number; delivered: number; failed: number }>`
    SELECT sink AS name, (minute - CAST(${from} AS BIGINT)) / CAST(${bucketMs} AS BIGINT) AS n, sum(delivered) AS delivered, sum(failed) AS failed
    FROM sink_minutes WHERE minute >= CAST(${from} AS BIGINT) AND minute < CAST(${to} AS BIGINT)
    GROUP BY sink, n`.execute(db);
  return rows;
}

/** Every bucket of the window, the empty ones included. */
export async function readStats(db: Kysely<Schema>, window: StatsWindow): Promise<StatsBucket[]> {
  const [accepted, sinks] = await Promise.all([acceptedCounts(db, window), sinkCounts(db, window)]);
  const buckets: StatsBucket[] = Array.from({ length: window.count }, (_, i) => ({
    start: new Date(window.from + i * window.bucketMs).toISOString(),
    accepted: {},
    delivered: {},
    failed: {},
  }));
  const add = (rows: Counts, key: 'accepted' | 'delivered' | 'failed') => {
    for (const { name, n, count } of rows) {
      const bucket = buckets[Number(n)];
      if (bucket && Number(count) > 0) bucket[key][name] = Number(count);
    }
  };
  add(accepted, 'accepted');
  add(sinks.map(({ name, n, delivered }) => ({ name, n, count: delivered })), 'delivered');
  add(sinks.map(({ name, n, failed }) => ({ name, n, count: failed })), 'failed');
  return buckets;
}

/** Counts of one sink in one minute, to add to the stored ones: a row of `sink_minutes`. */
export type SinkMinute = SinkMinutesTable;

/**
 * Adds a batch of counts in one statement. A counter lost to a power failure only leaves a chart a
 * little short, so the upsert needs no fsync of its own (the next delivery commit makes it durable).
 */
export async function addSinkMinutes(database: Database, counts: SinkMinute[]): Promise<void> {
  if (counts.length === 0) return;
  await executeUnsynced(
    database,
    database.kysely
      .insertInto('sink_minutes')
      .values(counts)
      .onConflict((oc) =>
        oc.columns(['minute', 'sink']).doUpdateSet((eb) => ({
          delivered: sql<number>`${eb.ref('sink_minutes.delivered')} + ${eb.ref('excluded.delivered')}`,
          failed: sql<number>`${eb.ref('sink_minutes.failed')} + ${eb.ref('excluded.failed')}`,
        })),
      ),
  );
}
