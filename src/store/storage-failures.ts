import type { Clock } from '../clock.js';
import type { Logger } from '../log.js';

const REASON_MAX = 200;

/**
 * Why storage failed, safe to log and to show on the internal /readyz: the driver's code and
 * message of the innermost cause, cut short (no query text or parameters, which could carry a body).
 */
export function storageFailureReason(error: unknown): string {
  let inner = error;
  while (inner instanceof Error && inner.cause !== undefined) inner = inner.cause;
  const { code, message } = inner instanceof Error ? (inner as Error & { code?: unknown }) : { code: undefined, message: String(inner) };
  const text = typeof code === 'string' && !message.includes(code) ? `${code}: ${message}` : message;
  return text.length > REASON_MAX ? `${text.slice(0, REASON_MAX)}…` : text;
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
  const last = new Map<string, { at: number; suppressed: number }>();
  return (error) => {
    const reason = storageFailureReason(error);
    const now = clock.now();
    const seen = last.get(reason);
    if (seen && now - seen.at < intervalMs) return void seen.suppressed++;
    for (const [key, entry] of last) if (now - entry.at >= intervalMs) last.delete(key);
    logger.error({ reason, suppressed: seen?.suppressed ?? 0 }, 'storage failure');
    last.set(reason, { at: now, suppressed: 0 });
  };
}
