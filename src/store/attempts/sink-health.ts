import { sql, type Kysely } from 'kysely';
import type { Schema } from '../schema.js';
import { FAILED_ATTEMPT } from './attempt-rows.js';

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

/** How a statuses key names an attempt: its HTTP status, else its failure's class or code. */
function statusKey(status: number | null, code: string | null): string | undefined {
  if (status !== null) return String(status);
  if (code === null) return undefined;
  if (code === 'timeout') return 'timeout';
  if (code === 'connection_error') return 'connection';
  return code;
}

/** The nearest-rank percentile of sorted values. */
const percentile = (sorted: Float64Array, p: number): number => sorted[Math.max(0, Math.ceil((p / 100) * sorted.length) - 1)] as number;

/** A failure as `lastError` reads elsewhere (SinkFailure.summary): the code, then the detail when it adds something. */
const summary = (code: string, message: string | null): string => (message && message !== code ? `${code}: ${message}` : code);

const iso = (ms: number | null | undefined) => (ms === null || ms === undefined ? null : new Date(Number(ms)).toISOString());

/**
 * A sink's attempts since `since` (contract section 16), counted exactly from the recorded attempts.
 * With only failed attempts recorded (or none), successes (and with none, failures) are counted from
 * the per-minute delivery counts, whose minutes start at or after `since`.
 */
export async function sinkHealth(
  db: Kysely<Schema>,
  { sink, window, since, mode }: { sink: string; window: string; since: number; mode: AttemptsMode },
): Promise<SinkHealth> {
  const inWindow = db.selectFrom('attempts').where('sink', '=', sink).where('at', '>=', since);
  const [groups, durations, minutes, lastSuccess, lastFailure] = await Promise.all([
    inWindow
      .select(['outcome', 'status', 'error_code', sql<number>`count(*)`.as('count')])
      .groupBy(['outcome', 'status', 'error_code'])
      .execute(),
    inWindow.select('duration_ms').where('answered', '=', 1).execute(),
    mode === 'all'
      ? Promise.resolve(undefined)
      : db
          .selectFrom('sink_minutes')
          .select([sql<number>`coalesce(sum(delivered), 0)`.as('delivered'), sql<number>`coalesce(sum(failed), 0)`.as('failed')])
          .where('sink', '=', sink)
          .where('minute', '>=', since)
          .executeTakeFirst(),
    db.selectFrom('attempts').select(sql<number>`max(at)`.as('at')).where('sink', '=', sink).where('outcome', '=', 'delivered').executeTakeFirst(),
    db
      .selectFrom('attempts')
      .select(['at', 'error_code', 'error_message'])
      .where('sink', '=', sink)
      .where(FAILED_ATTEMPT)
      .orderBy('at', 'desc')
      .orderBy('id', 'desc')
      .limit(1)
      .executeTakeFirst(),
  ]);
  let delivered = 0;
  let failed = 0;
  const statuses: Record<string, number> = {};
  for (const group of groups) {
    const count = Number(group.count);
    if (group.outcome === 'delivered') delivered += count;
    else failed += count;
    const key = statusKey(group.status === null ? null : Number(group.status), group.error_code);
    if (key !== undefined) statuses[key] = (statuses[key] ?? 0) + count;
  }
  if (minutes) {
    delivered = Number(minutes.delivered);
    if (mode === 'off') failed = Number(minutes.failed);
  }
  const sorted = Float64Array.from(durations, (row) => Number(row.duration_ms)).sort();
  const attempts = delivered + failed;
  return {
    sink,
    window,
    attempts,
    delivered,
    failed,
    successRate: attempts === 0 ? null : delivered / attempts,
    latencyMs: sorted.length === 0 ? null : { p50: percentile(sorted, 50), p95: percentile(sorted, 95), p99: percentile(sorted, 99) },
    statuses,
    lastSuccessAt: iso(lastSuccess?.at),
    lastFailureAt: iso(lastFailure?.at),
    lastError: lastFailure?.error_code ? summary(lastFailure.error_code, lastFailure.error_message) : null,
  };
}
