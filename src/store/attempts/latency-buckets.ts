/**
 * The fixed latency histogram of a sink's answered attempts, kept per minute (`attempt_minutes`):
 * upper bounds in ms, inclusive, about 10 per decade (each at most a third above the one before),
 * one bucket per millisecond below 7 ms; slower answers fall in the last bucket (`le_inf`). The
 * columns are the table's (migration 018): other bounds need a migration of their own.
 */
export const LATENCY_BOUNDS_MS = [
  1, 2, 3, 4, 5, 6, 8, 10, 12, 15, 20, 25, 30, 40, 50, 60, 80, 100, 120, 150, 200, 250, 300, 400, 500, 600, 800, 1000, 1200, 1500, 2000, 2500,
  3000, 4000, 5000, 6000, 8000, 10_000, 12_000, 15_000, 20_000, 25_000, 30_000, 40_000, 50_000, 60_000,
] as const;

export type LatencyColumn = `le_${(typeof LATENCY_BOUNDS_MS)[number]}` | 'le_inf';

/** One column per bucket, in the bounds' order, the last one unbounded. */
export const LATENCY_COLUMNS: readonly LatencyColumn[] = [...LATENCY_BOUNDS_MS.map((bound): LatencyColumn => `le_${bound}`), 'le_inf'];

/** The bucket (an index into LATENCY_COLUMNS) of a duration in whole ms. */
export function latencyBucket(durationMs: number): number {
  const index = LATENCY_BOUNDS_MS.findIndex((bound) => durationMs <= bound);
  return index === -1 ? LATENCY_BOUNDS_MS.length : index;
}

/**
 * The nearest-rank `p`th percentile of a histogram (counts in LATENCY_COLUMNS order): the upper
 * bound of the bucket holding that rank, never below the exact figure; `slowestMs` (the slowest
 * answer counted) caps it and stands for the unbounded bucket.
 */
export function histogramPercentile(counts: readonly number[], p: number, slowestMs: number): number {
  const total = counts.reduce((sum, count) => sum + count, 0);
  const rank = Math.max(1, Math.ceil((p / 100) * total));
  let seen = 0;
  for (const [index, count] of counts.entries()) {
    seen += count;
    if (seen >= rank) return Math.min(LATENCY_BOUNDS_MS[index] ?? slowestMs, slowestMs);
  }
  return slowestMs;
}
