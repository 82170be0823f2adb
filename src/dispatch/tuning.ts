/** Timing of fan-out, injectable so tests run on tiny delays. */
export interface DispatchTuning {
  /** Safety-net poll: work committed elsewhere (CLI, other replicas), expired leases, due retries. */
  pollMs: number;
  /** Rows claimed by one query at most. */
  batchSize: number;
  /** In-process retries (p-retry) of a fresh event's retryable failure, before waits move to the database. */
  quickRetries: number;
  /** p-retry's first delay and growth factor (each delay is randomized up to twice as long). */
  quickMinDelayMs: number;
  quickFactor: number;
  /** A Retry-After longer than this is waited in the database, not in process. */
  quickMaxDelayMs: number;
  /** Delay of a retry scheduled in the database after `attempts` attempts, before jitter. */
  retryDelayMs(attempts: number): number;
  /** Lease time beyond the longest run of attempts, for slow writes and clock skew between replicas. */
  leaseMarginMs: number;
}

export const defaultTuning: DispatchTuning = {
  pollMs: 2000,
  batchSize: 100,
  quickRetries: 2,
  quickMinDelayMs: 500,
  quickFactor: 2,
  quickMaxDelayMs: 5000,
  retryDelayMs: (attempts) => Math.min(300_000, 10_000 * 2 ** Math.max(0, attempts - 1)),
  leaseMarginMs: 30_000,
};

/** Exponential backoff is jittered (x0.8..1.2) so retries of one outage do not arrive together. */
export function jittered(ms: number, random: () => number = Math.random): number {
  return Math.round(ms * (0.8 + 0.4 * random()));
}

/** The longest a claimed row can be worked on: every quick attempt timing out, with every wait. */
export function leaseMsFor(attemptTimeoutMs: number, tuning: DispatchTuning): number {
  const waits = Array.from({ length: tuning.quickRetries }, (_, i) => 2 * tuning.quickMinDelayMs * tuning.quickFactor ** i);
  const waiting = waits.reduce((sum, wait) => sum + wait + tuning.quickMaxDelayMs, 0);
  return (tuning.quickRetries + 1) * attemptTimeoutMs + waiting + tuning.leaseMarginMs;
}
