import { openDatabase } from '../src/store/engines/database.js';
import { readStats, statsWindow } from '../src/store/state/stats.js';

const MINUTE_MS = 60_000;
const RUNS = 5;

/**
 * `GET /admin/stats`'s query for the last 24 hours at 1-minute buckets (1,441 of them: the store's
 * query, beyond the API's 500-bucket cap, so the figure bounds every request the API takes) on the
 * grown database. Its per-minute counters are filled first for the pre-filled span (two sinks, every
 * minute), as a relay that delivered all along would have left them. Target: under 200 ms.
 */
export async function runStatsQuery(file: string, stored: string): Promise<{ lines: string[] }> {
  const database = openDatabase({ url: file });
  try {
    if (database.dialect !== 'sqlite') throw new Error('the growth database is a SQLite file');
    // The day that ends with the newest delivery (a cached pre-fill is as old as its cache).
    const span = database.sqlite.prepare('SELECT min(received_at) AS "from", max(received_at) AS "to" FROM deliveries').get() as { from: number; to: number };
    const insert = database.sqlite.prepare('INSERT OR IGNORE INTO sink_minutes (sink, minute, delivered, failed) VALUES (?, ?, ?, ?)');
    database.sqlite.transaction(() => {
      for (let minute = Math.floor(span.from / MINUTE_MS) * MINUTE_MS; minute <= span.to; minute += MINUTE_MS) {
        insert.run('nats', minute, 240, 0);
        insert.run('alerts', minute, 20, 1);
      }
    })();
    const now = span.to;
    const window = statsWindow(now - 24 * 60 * MINUTE_MS, now, MINUTE_MS);
    const times: number[] = [];
    let accepted = 0;
    for (let run = 0; run < RUNS; run++) {
      const started = performance.now();
      const buckets = await readStats(database.kysely, window);
      times.push(performance.now() - started);
      accepted = buckets.reduce((sum, b) => sum + Object.values(b.accepted).reduce((a, n) => a + n, 0), 0);
    }
    times.sort((a, b) => a - b);
    const median = times[Math.floor(RUNS / 2)] as number;
    return {
      lines: [
        `- Stats (GET /admin/stats, 24 h at 1-minute buckets, ${stored} stored, ${accepted.toLocaleString('en')} accepted in the window): ` +
          `median ${median.toFixed(0)} ms, slowest ${(times.at(-1) as number).toFixed(0)} ms of ${RUNS} (target < 200 ms)`,
      ],
    };
  } finally {
    await database.close();
  }
}
