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
 * Untrusted text (ids, types and header values from requests) as logged: a short prefix and how long
 * it was, so one request cannot write a log line the size of its headers.
 */
export function untrusted(value: string | null | undefined, max = 64): string | undefined {
  if (value === null || value === undefined) return undefined;
  return value.length <= max ? value : `${value.slice(0, max)}…(${value.length} chars)`;
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
