import { SET_ASIDE_BATCH } from '../store/log/set-aside.js';

/** Timing of fan-out, injectable so tests run on tiny delays. */
export interface DispatchTuning {
  /** Safety-net poll: work committed elsewhere (CLI, other replicas), expired leases, due retries. */
  pollMs: number;
  /** Rows claimed, or log entries read, by one query at most. */
  batchSize: number;
  /**
   * The least time between two stores of how far a lane has settled the log (a crash or a stall sends
   * again what settled since the last). Every store is a write transaction (three lanes make some 170
   * to 300 a second at an intake of 100/s); 100 ms measured
   * retention faster beside intake, but doubled the copies after a SIGKILL and let a stalled replica's
   * unstored moves be sent again after newer events, so it stays at 10 ms.
   */
  cursorStoreMs: number;
  /** In-process retries (p-retry) of a fresh event's retryable failure, before waits move to the database. */
  quickRetries: number;
  /** p-retry's first delay and growth factor (each delay is randomized up to twice as long). */
  quickMinDelayMs: number;
  quickFactor: number;
  /** A Retry-After longer than this is waited in the database, not in process. */
  quickMaxDelayMs: number;
  /**
   * The longest a Retry-After may park a row (default 1 hour): a hook answering `Retry-After: 31536000`
   * would otherwise hold the event for a year. The capped attempt still counts toward maxAttempts.
   */
  maxRetryAfterMs: number;
  /** Delay of a retry scheduled in the database after `attempts` attempts, before jitter. */
  retryDelayMs(attempts: number): number;
  /** Lease time beyond the longest run of attempts, for slow writes and clock skew between replicas. */
  leaseMarginMs: number;
  /**
   * One lease for every sink (BOXRELAY_OUTBOX_LEASE_MS) instead of each sink's `leaseMsFor`: how
   * soon the rows of a replica that died are sent by another. Undefined: computed per sink.
   */
  leaseMs: number | undefined;
  /**
   * How long a lease (a claimed row, a log partition) lasts without renewal. Leases are renewed at
   * each poll while their process lives, so a process that dies hands its work on within about this
   * long, however long its attempts may run.
   */
  holdMs: number;
  /**
   * A run of failures at least this long, ended by a delivery, makes the sink's backed-off work due
   * at once (as a resume does). A shorter run does not: an event that fails among good ones is not
   * tried again at each success.
   */
  recoverAfterMs: number;
  /** Pending work of a sink that no replica has served for this long is set aside (BOXRELAY_UNSERVED_SINK_GRACE). */
  unservedGraceMs: number;
  /** Rows (or log entries) that one set-aside step moves, each step its own transaction. */
  setAsideBatch: number;
}

/**
 * The wait after the n-th failed attempt, before jitter. A fresh event's first waits are the quick
 * in-process retries (about 0.5 s and 1 s), so with the default 8 attempts a hook's scheduled waits
 * are 10 m, 30 m, 2 h, 6 h and 14 h: about a day before the event is a dead letter, so a receiver
 * down for hours loses nothing (and one failing throughout pauses after `pauseAfter` instead).
 */
export const RETRY_SCHEDULE_MS = [30_000, 120_000, 600_000, 1_800_000, 7_200_000, 21_600_000, 50_400_000] as const;

export const defaultTuning: DispatchTuning = {
  pollMs: 2000,
  batchSize: 100,
  cursorStoreMs: 10,
  quickRetries: 2,
  quickMinDelayMs: 500,
  quickFactor: 2,
  quickMaxDelayMs: 5000,
  maxRetryAfterMs: 3_600_000,
  retryDelayMs: (attempts) => RETRY_SCHEDULE_MS[Math.min(attempts, RETRY_SCHEDULE_MS.length) - 1] ?? RETRY_SCHEDULE_MS[0]!,
  leaseMarginMs: 30_000,
  leaseMs: undefined,
  holdMs: 8000,
  recoverAfterMs: 60_000,
  unservedGraceMs: 600_000,
  setAsideBatch: SET_ASIDE_BATCH,
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

/**
 * How long the attempts of one claim may run: the lease less its margin, and at most half a
 * configured lease, so a short lease still leaves time to write the outcome back. For a computed
 * lease this never cuts the quick retries short; for a short configured one, retries that would
 * outlive it are scheduled in the database instead.
 */
export function workMsFor(leaseMs: number, tuning: DispatchTuning): number {
  return leaseMs - Math.min(tuning.leaseMarginMs, leaseMs / 2);
}
