import { sql, type Kysely } from 'kysely';
import type { Schema } from '../schema.js';
import { FAILED_ATTEMPT } from './attempt-rows.js';
import { histogramPercentile, LATENCY_COLUMNS } from './latency-buckets.js';

/** Which attempts are recorded (`BOXRELAY_ATTEMPTS`). */
export type AttemptsMode = 'all' | 'failed' | 'off';

export interface SinkHealth {
  sink: string;
  window: string;
  attempts: number;
  delivered: number;
  failed: number;
  successRate: number | null;
  latencyMs: { p50: number; p95: number; p99: number } | null;
  statuses: Record<string, number>;
  lastSuccessAt: string | null;
  lastFailureAt: string | null;
  /** As an event's deliveries give it: the code, then the detail. */
  lastError: string | null;
}

/** A failure as `lastError` reads elsewhere (SinkFailure.summary): the code, then the detail when it adds something. */
const summary = (code: string, message: string | null): string => (message && message !== code ? `${code}: ${message}` : code);

const iso = (ms: number | null | undefined) => (ms === null || ms === undefined ? null : new Date(Number(ms)).toISOString());

/** A sink's latest minute with a success (or a failure): a walk back over its minutes, stopped at the first. */
const lastAt = (db: Kysely<Schema>, sink: string, column: 'last_success_at' | 'last_failure_at') =>
  db.selectFrom('attempt_minutes').select(column).where('sink', '=', sink).where(column, 'is not', null).orderBy('minute', 'desc').limit(1).executeTakeFirst();

/**
 * A sink's attempts in the minutes that start at or after `since` (contract section 16), read from
 * the per-minute sums (every attempt counted, whatever `BOXRELAY_ATTEMPTS` keeps): one row per
 * minute of the window and per status, never the attempts themselves. The percentiles come from
 * the sums' latency histogram (histogramPercentile). `lastError` is the newest failed attempt kept
 * (one step of its index).
 */
export async function sinkHealth(db: Kysely<Schema>, { sink, window, since }: { sink: string; window: string; since: number }): Promise<SinkHealth> {
  const sum = (column: string) => sql<number>`coalesce(sum(${sql.ref(column)}), 0)`.as(column);
  const [totals, statusRows, lastSuccess, lastFailure, lastError] = await Promise.all([
    db
      .selectFrom('attempt_minutes')
      .select([sum('delivered'), sum('retried'), sum('dead_lettered'), sql<number>`coalesce(max(slowest_ms), 0)`.as('slowest_ms'), ...LATENCY_COLUMNS.map(sum)])
      .where('sink', '=', sink)
      .where('minute', '>=', since)
      .executeTakeFirstOrThrow(),
    db
      .selectFrom('attempt_statuses')
      .select(['status', sql<number>`sum(attempts)`.as('attempts')])
      .where('sink', '=', sink)
      .where('minute', '>=', since)
      .groupBy('status')
      .execute(),
    lastAt(db, sink, 'last_success_at'),
    lastAt(db, sink, 'last_failure_at'),
    db
      .selectFrom('attempts')
      .select(['error_code', 'error_message'])
      .where('sink', '=', sink)
      .where(FAILED_ATTEMPT)
      .orderBy('at', 'desc')
      .orderBy('id', 'desc')
      .limit(1)
      .executeTakeFirst(),
  ]);
  const row = totals as unknown as Record<string, number | string>;
  const delivered = Number(row.delivered);
  const failed = Number(row.retried) + Number(row.dead_lettered);
  const histogram = LATENCY_COLUMNS.map((column) => Number(row[column]));
  const answered = histogram.reduce((total, count) => total + count, 0);
  const slowestMs = Number(row.slowest_ms);
  const attempts = delivered + failed;
  return {
    sink,
    window,
    attempts,
    delivered,
    failed,
    successRate: attempts === 0 ? null : delivered / attempts,
    latencyMs:
      answered === 0
        ? null
        : { p50: histogramPercentile(histogram, 50, slowestMs), p95: histogramPercentile(histogram, 95, slowestMs), p99: histogramPercentile(histogram, 99, slowestMs) },
    statuses: Object.fromEntries(statusRows.map((status) => [status.status, Number(status.attempts)])),
    lastSuccessAt: iso(lastSuccess?.last_success_at),
    lastFailureAt: iso(lastFailure?.last_failure_at),
    lastError: lastError?.error_code ? summary(lastError.error_code, lastError.error_message) : null,
  };
}
