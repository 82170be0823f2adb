import { Writable } from 'node:stream';
import { createLogger, type Logger } from '../../src/log.js';

type Entry = Record<string, unknown>;

export interface CapturedLogs {
  logger: Logger;
  lines: string[];
  text(): string;
  entries(): Entry[];
  /** Resolves with the first entry (already written or still to come) that matches. */
  waitFor(match: (entry: Entry) => boolean): Promise<Entry>;
}

/** A real pino logger writing into memory, so tests read exactly what would reach the logs. */
export function captureLogs(level = 'debug'): CapturedLogs {
  const lines: string[] = [];
  const waiters: { match: (entry: Entry) => boolean; resolve: (entry: Entry) => void }[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _encoding, done) {
      for (const line of chunk.toString('utf8').split('\n').filter(Boolean)) {
        lines.push(line);
        const entry = JSON.parse(line) as Entry;
        for (const waiter of [...waiters]) {
          if (waiter.match(entry)) {
            waiters.splice(waiters.indexOf(waiter), 1);
            waiter.resolve(entry);
          }
        }
      }
      done();
    },
  });
  const entries = () => lines.map((line) => JSON.parse(line) as Entry);
  return {
    logger: createLogger(level, stream),
    lines,
    text: () => lines.join('\n'),
    entries,
    waitFor(match) {
      const found = entries().find(match);
      if (found) return Promise.resolve(found);
      return new Promise((resolve) => waiters.push({ match, resolve }));
    },
  };
}
