import { realWait, type Wait } from './clock.js';

/** `Retry-After` (RFC 9110) as seconds or an HTTP date, in ms from `now`; undefined when absent or unreadable. */
export function parseRetryAfter(value: string | null, now: number): number | undefined {
  if (value === null) return undefined;
  const trimmed = value.trim();
  if (/^\d+$/.test(trimmed)) return Number(trimmed) * 1000;
  // Every HTTP-date form starts with the day name; Date.parse alone would take '1.5' for a date in 2001.
  const at = /^[A-Za-z]{3}/.test(trimmed) ? Date.parse(trimmed) : Number.NaN;
  return Number.isNaN(at) ? undefined : Math.max(0, at - now);
}

/** p-retry's backoff settings, as passed to it. */
export interface RetryBackoff {
  minTimeout: number;
  factor: number;
  maxTimeout?: number;
}

/**
 * Retry-After is a lower bound on top of p-retry: after a failure p-retry sleeps at least its
 * un-jittered backoff (minTimeout * factor^retriesConsumed, at most maxTimeout), so only what the
 * Retry-After asks beyond that is waited here, from `onFailedAttempt` or `shouldRetry`.
 */
export async function waitRestOfRetryAfter(
  retryAfterMs: number | undefined,
  backoff: RetryBackoff,
  retriesConsumed: number,
  signal?: AbortSignal,
  wait: Wait = realWait,
): Promise<void> {
  const floor = Math.min(backoff.minTimeout * backoff.factor ** retriesConsumed, backoff.maxTimeout ?? Number.POSITIVE_INFINITY);
  const rest = (retryAfterMs ?? 0) - floor;
  if (rest > 0) await wait(rest, signal);
}
