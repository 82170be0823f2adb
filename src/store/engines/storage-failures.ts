import type { Clock } from '../../clock.js';
import { causeChain, describeError } from '../../errors.js';
import { throttledLog, type Logger } from '../../log.js';

/**
 * Why storage failed, safe to log and to show on the internal /readyz: the driver's code and
 * message of the innermost cause, cut short (no query text or parameters, which could carry a body).
 */
export function storageFailureReason(error: unknown): string {
  return describeError(causeChain(error).at(-1), { codes: true });
}

export interface StorageFailureLogOptions {
  logger: Logger;
  clock: Clock;
  /** The same reason is logged at most once per this many ms (default 30 s); how many were left out is counted. */
  intervalMs?: number;
}

/**
 * Logs each storage failure's cause, rate-limited per distinct reason: an outage under load
 * fails every request, and one line per request would bury everything else.
 */
export function createStorageFailureLog({ logger, clock, intervalMs = 30_000 }: StorageFailureLogOptions): (error: unknown) => void {
  const report = throttledLog((reason: string, unlogged) => logger.error({ reason, suppressed: unlogged }, 'storage failure'), {
    keyOf: (reason) => reason,
    every: { clock, ms: intervalMs },
  });
  return (error) => report(storageFailureReason(error));
}
