import { sql, type Kysely } from 'kysely';
import { OPERATOR_EVENT_PREFIX } from '../events/cloudevent.js';
import type { Database } from './database.js';
import type { Schema } from './schema.js';
import { executeUnsynced } from './unsynced.js';

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

// CAST: better-sqlite3 binds a JS number as REAL, which would make the division a fraction.

/**
 * Received events per type and bucket: a walk over the few distinct types of the (type, received_at)
 * index, each counted over the window's range of that index (covering), so the history outside
 * the window is never read. Operator events (`boxrelay.*`) are the relay's own, not received.
 */
export async function acceptedCounts(db: Kysely<Schema>, { from, bucketMs, count }: StatsWindow) {
  const to = from + count * bucketMs;
  const { rows } = await sql<{ name: string; n: number; count: number }>`
    WITH RECURSIVE t(type) AS (
      SELECT min(type) FROM deliveries
      UNION ALL SELECT (SELECT min(type) FROM deliveries WHERE type > t.type) FROM t WHERE t.type IS NOT NULL
    )
    SELECT d.type AS name, CAST((d.received_at - ${from}) / ${bucketMs} AS INTEGER) AS n, count(*) AS count
    FROM t JOIN deliveries AS d ON d.type = t.type
    WHERE t.type IS NOT NULL AND t.type NOT LIKE ${`${OPERATOR_EVENT_PREFIX}%`} AND d.received_at >= ${from} AND d.received_at < ${to}
    GROUP BY d.type, n`.execute(db);
  return rows;
}

/** Deliveries and failed attempts per sink and bucket, from the per-minute counters (their primary key leads with the minute). */
export async function sinkCounts(db: Kysely<Schema>, { from, bucketMs, count }: StatsWindow) {
  const to = from + count * bucketMs;
  const { rows } = await sql<{ name: string; n: number; delivered: number; failed: number }>`
    SELECT sink AS name, CAST((minute - ${from}) / ${bucketMs} AS INTEGER) AS n, sum(delivered) AS delivered, sum(failed) AS failed
    FROM sink_minutes WHERE minute >= ${from} AND minute < ${to}
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

/** Counts of one sink in one minute, to add to the stored ones. */
export interface SinkMinute {
  sink: string;
  /** Epoch ms of the minute's start. */
  minute: number;
  delivered: number;
  failed: number;
}

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
