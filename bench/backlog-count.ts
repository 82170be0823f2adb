/**
 * The backlog count of a `/metrics` scrape (issue 31, item 4): a SQLite file holding `events`
 * deliveries past a hook's cursors, counted once from nothing (the whole backlog, as every scrape
 * did before the count was kept), then again after new deliveries arrived and the cursors moved on,
 * as the next scrape finds it (only those are read).
 */
import { join } from 'node:path';
import { createBacklogCount } from '../src/store/log/count-backlogs.js';
import { openDatabase } from '../src/store/engines/database.js';
import { appendLog, backlogDatabase } from './backlog.js';
import type { Context } from './targets.js';

/** New deliveries and cursor moves between two scrapes (15 s at 1,000/s in, a drain of about 700/s out). */
const ARRIVED = 15_000;
const PASSED = 10_000;

export async function runBacklogCount(ctx: Context, events: number, log: (line: string) => void): Promise<{ lines: string[] }> {
  const file = join(ctx.tmp, 'backlog-count.db');
  log(`bench: backlog count, ${events.toLocaleString('en')} past a hook's cursors`);
  await backlogDatabase(ctx, file, events, 'h');
  const database = openDatabase({ url: file });
  if (database.dialect !== 'sqlite') throw new Error('the backlog count bench runs on SQLite');
  try {
    const count = createBacklogCount(database);
    const timed = async (): Promise<{ ms: number; backlog: number }> => {
      const began = performance.now();
      const [counted] = await count();
      return { ms: performance.now() - began, backlog: counted?.backlog ?? 0 };
    };
    const first = await timed();
    appendLog(database.sqlite, events, ARRIVED, 'h');
    database.sqlite.prepare('UPDATE log_cursors SET seq = ? WHERE sink = ?').run(PASSED, 'h');
    const next = await timed();
    const fresh = await createBacklogCount(database)();
    if (next.backlog !== fresh[0]?.backlog) throw new Error(`the kept count ${next.backlog} is not the fresh one ${fresh[0]?.backlog}`);
    return {
      lines: [
        '## Backlog count of a scrape (SQLite)',
        '',
        `A hook ${first.backlog.toLocaleString('en')} entries behind: a count from nothing (the whole backlog, which every scrape read before) ${first.ms.toFixed(0)} ms; ` +
          `the next, after ${ARRIVED.toLocaleString('en')} new deliveries and the cursors ${PASSED.toLocaleString('en')} on, ${next.ms.toFixed(0)} ms ` +
          `(${next.backlog.toLocaleString('en')}, equal to a fresh count).`,
      ],
    };
  } finally {
    await database.close();
  }
}
