import { pino, type DestinationStream, type Logger } from 'pino';
import type { Clock } from './clock.js';

export type { Logger };

/**
 * Paths that may carry secrets. The relay never logs headers or bodies on purpose; redaction is the
 * safety net for an error object or a config dump that would.
 */
export const redactedPaths = [
  'secret',
  'secrets',
  '*.secret',
  '*.secrets',
  'token',
  '*.token',
  'adminToken',
  'natsToken',
  'natsPassword',
  // Bus URLs may hold a password.
  'amqpUrl',
  'redisUrl',
  'mqttUrl',
  'kafkaSaslPassword',
  'upstreamApiKey',
  'secretsEncryptionKey',
  'authorization',
  'headers.authorization',
  'headers["x-service-signature"]',
  'headers["webhook-signature"]',
  'req.headers.authorization',
  'req.headers["x-service-signature"]',
  'signature',
  '*.signature',
];

/**
 * Untrusted text (ids, types and header values from requests, upstream records, foreign error
 * messages) as logged or put in a message: a short prefix and how long it was, so one request cannot
 * write a log line the size of its headers. The one cutter of such text.
 */
export function untrusted(value: string, max?: number): string;
export function untrusted(value: string | null | undefined, max?: number): string | undefined;
export function untrusted(value: string | null | undefined, max = 64): string | undefined {
  if (value === null || value === undefined) return undefined;
  return value.length <= max ? value : `${value.slice(0, max)}…(${value.length} chars)`;
}

/** A log of a failure met again and again (a poll, a retry loop, every event); `clear()` after a success. */
export interface ReasonLog<T> {
  (failure: T): void;
  clear(): void;
}

export interface ThrottleOptions<T> {
  /** Failures of different keys (one per hook, one per reason) are throttled apart. Default: one key. */
  keyOf?: (failure: T) => string;
  /** A failure whose reason differs from the one last logged for its key is logged at once. Default: one reason. */
  reasonOf?: (failure: T) => string;
  /** A failure is logged again once `ms` have passed since its key was last logged. Default: only after `clear()`. */
  every?: { clock: Clock; ms: number };
}

/**
 * The one throttle of repeated failures in the log, so a failure met in a loop is not written at
 * every turn: a failure is logged when its key has none logged yet, when its reason changed, or
 * when `every.ms` has passed; the others are only counted, and `log` is given how many were not
 * logged since the key's last line. `clear()` forgets what was logged (the loop succeeded).
 */
export function throttledLog<T>(
  log: (failure: T, unlogged: number) => void,
  { keyOf = () => '', reasonOf = () => '', every }: ThrottleOptions<T> = {},
): ReasonLog<T> {
  const logged = new Map<string, { reason: string; at: number; unlogged: number }>();
  const report = (failure: T) => {
    const key = keyOf(failure);
    const reason = reasonOf(failure);
    const now = every?.clock.now() ?? 0;
    const last = logged.get(key);
    if (last && last.reason === reason && (every === undefined || now - last.at < every.ms)) {
      last.unlogged++;
      return;
    }
    log(failure, last?.unlogged ?? 0);
    // A key whose period is over and that left nothing out would be logged anew anyway: forgotten,
    // so keys met once (a reason of a past outage) do not pile up.
    if (every) for (const [other, entry] of logged) if (entry.unlogged === 0 && now - entry.at >= every.ms) logged.delete(other);
    logged.set(key, { reason, at: now, unlogged: 0 });
  };
  return Object.assign(report, { clear: () => logged.clear() });
}

/** Logs a failure once per distinct reason (a change of reason is logged at once), again after `clear()`. */
export function oncePerReason<T>(log: (failure: T) => void, reasonOf: (failure: T) => string = String): ReasonLog<T> {
  return throttledLog((failure: T) => log(failure), { reasonOf });
}

export type LogDestination = ReturnType<typeof pino.destination>;

/**
 * Where `serve` writes its log (stdout), as pino does by default: asynchronous writes, so lines
 * written while one write is under way go out together; what is buffered is written at exit.
 */
export function logDestination(fd: number): LogDestination {
  return pino.destination({ dest: fd, sync: false });
}

/** Where a logger writes: lines logged elsewhere (the fan-out worker) join its stream, one writer of stdout. */
export function destinationOf(logger: Logger): { write(line: string): void } {
  return (logger as unknown as Record<symbol, { write(line: string): void }>)[pino.symbols.streamSym] as { write(line: string): void };
}

export function createLogger(level: string, destination?: DestinationStream): Logger {
  return pino(
    {
      level,
      base: { service: 'boxrelay' },
      redact: { paths: redactedPaths, censor: '[redacted]' },
      timestamp: pino.stdTimeFunctions.isoTime,
    },
    destination,
  );
}
