import { pino, type DestinationStream, type Logger } from 'pino';

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

/** A log of a failure met again and again (a poll, a retry loop); `clear()` after a success. */
export interface ReasonLog<T> {
  (failure: T): void;
  clear(): void;
}

/**
 * Logs a failure once per distinct reason, not at every turn of the loop that meets it; after
 * `clear()` (the loop succeeded) the same reason is logged again when it comes back.
 */
export function oncePerReason<T>(log: (failure: T) => void, reasonOf: (failure: T) => string = String): ReasonLog<T> {
  let last: string | undefined;
  const report = (failure: T) => {
    const reason = reasonOf(failure);
    if (reason !== last) log(failure);
    last = reason;
  };
  return Object.assign(report, { clear: () => void (last = undefined) });
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
