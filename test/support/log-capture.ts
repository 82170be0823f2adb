import { Writable } from 'node:stream';
import { createLogger, type Logger } from '../../src/log.js';

/** A real pino logger writing into memory, so tests can read exactly what would reach the logs. */
export function captureLogs(level = 'debug'): { logger: Logger; lines: string[]; text(): string } {
  const lines: string[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _encoding, done) {
      lines.push(...chunk.toString('utf8').split('\n').filter(Boolean));
      done();
    },
  });
  return { logger: createLogger(level, stream), lines, text: () => lines.join('\n') };
}
