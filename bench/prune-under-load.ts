import { join } from 'node:path';
import pg from 'pg';
import { isPostgresUrl } from '../src/store/engines/database.js';
import { DAY_MS } from '../src/clock.js';
import { runLoad, summarizeAnswers, type Answer } from './load.js';
import { prefill, type Span } from './prefill.js';
import { runNode } from './processes.js';
import { relay, type Context } from './targets.js';

export interface PruneLoadSettings {
  /** Deliveries of one day just past the 30-day retention: what the run removes. */
  rows: number;
  /** Deliveries inside the retention window, kept. */
  recent: number;
  /** Fixed request rate of the load. */
  rate: number;
  connections: number;
  /** A PostgreSQL URL (an empty database of its own) instead of a fresh SQLite file. */
  database: string | undefined;
}

export interface PruneLoadResult {
  engine: string;
  removed: number;
  pruneMs: number;
  /** Answers that arrived while the prune ran. */
  during: { requests: number; p50: number; p99: number; max: number; non2xx: number; unavailable: number };
  /** The same load before the prune started (its first seconds left out). */
  before: { requests: number; p50: number; p99: number; max: number };
  met: boolean;
  lines: string[];
}

const TARGET_P99_MS = 100;
/** The relay's daily retention run starts this long after `serve` starts (src/store/retention/prune-schedule.ts). */
const FIRST_PRUNE_MS = 30_000;

/** Server-side generated rows, in receipt order with random ids, as the SQLite pre-fill makes them. */
async function prefillPostgres(url: string, spans: Span[]): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    for (const span of [...spans].sort((a, b) => a.from - b.from)) {
      await client.query(
        `INSERT INTO deliveries (id, type, box_id, created_at, received_at, attempt, payload)
         SELECT 'evt_' || md5(random()::text || g), 'box.ready', 'bx_' || lpad(((g * 7919) % 10000)::text, 6, '0'),
                to_char(to_timestamp(t / 1000.0) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'), t, 1,
                json_build_object('type', 'box.ready', 'notes', repeat('x', 200))::text
         FROM generate_series(0, $1::bigint - 1) AS g, LATERAL (SELECT $2::bigint + (($3::bigint - $2::bigint) * g) / $1::bigint AS t) AS at
         ORDER BY g`,
        [span.count, span.from, span.to],
      );
    }
    await client.query('VACUUM ANALYZE deliveries');
  } finally {
    await client.end();
  }
}

/**
 * Retention under load, as the relay itself does it: `serve` on a database holding one day of
 * deliveries past the retention window (plus recent ones), a steady load at a fixed rate (a busy
 * day's traffic, well under capacity, so latency shows the prune's stalls rather than queueing),
 * and the relay's own daily prune, whose first run comes 30 s after start. Latency is each
 * answer's own (from its due time: the load is paced, bench/load.ts), grouped by when it arrived.
 */
export async function runPruneUnderLoad(ctx: Context, settings: PruneLoadSettings, log: (line: string) => void): Promise<PruneLoadResult> {
  const url = settings.database ?? join(ctx.tmp, 'prune-load.db');
  const engine = isPostgresUrl(url) ? 'PostgreSQL' : 'SQLite';
  const now = Date.now();
  const spans: Span[] = [
    { count: settings.rows, from: now - 31 * DAY_MS, to: now - 30 * DAY_MS - 3_600_000 },
    { count: settings.recent, from: now - 29 * DAY_MS, to: now - 60_000 },
  ];
  log(`bench: prune under load (${engine}): pre-filling ${settings.rows} expired + ${settings.recent} recent deliveries`);
  await runNode([join(ctx.root, 'bin/boxrelay.js'), 'migrate'], { BOXRELAY_DATABASE: url }, ctx.root);
  if (engine === 'SQLite') prefill(url, spans);
  else await prefillPostgres(url, spans);

  const target = relay('prune-load', 'relay, pruning', ctx, { logLevel: 'info', database: () => url });
  const running = await target.start();
  const startedAt = Date.now();
  const answers: Answer[] = [];
  const stopLoad = new AbortController();
  try {
    const pruned = running.server.nextLine('removed deliveries');
    log(`bench: prune under load: ${settings.rate}/s over ${settings.connections} connections until the relay's first prune ends`);
    const load = runLoad(running.server.port, {
      seconds: 600,
      connections: settings.connections,
      rate: settings.rate,
      signal: stopLoad.signal,
      onResponse: (status, latencyMs) => answers.push({ at: Date.now(), status, latencyMs: Math.round(latencyMs * 10) / 10 }),
    });
    const record = JSON.parse(await pruned) as { time: string; deliveries: number; durationMs: number };
    const pruneEnd = Date.parse(record.time);
    // A few seconds more: answers held up by the last batch arrive after the log line.
    await new Promise((resolve) => setTimeout(resolve, 3000));
    stopLoad.abort();
    await load;

    const pruneStart = pruneEnd - record.durationMs;
    const during = {
      ...summarizeAnswers(answers, pruneStart, pruneEnd + 1000),
      unavailable: answers.filter((a) => a.status === 503).length,
    };
    const { requests, p50, p99, max } = summarizeAnswers(answers, startedAt + 5000, pruneStart - 1);
    const before = { requests, p50, p99, max };
    const met = during.p99 < TARGET_P99_MS && during.unavailable === 0 && record.deliveries >= settings.rows;
    const lines = [
      `- Prune under load (${engine}, ${settings.rate}/s fixed rate over ${settings.connections} connections; the relay's own daily run, ` +
        `${FIRST_PRUNE_MS / 1000} s after start): removed ${record.deliveries.toLocaleString('en')} of ${settings.rows.toLocaleString('en')} expired ` +
        `(${settings.recent.toLocaleString('en')} recent kept) in ${(record.durationMs / 1000).toFixed(1)} s; during it ${during.requests.toLocaleString('en')} answers, ` +
        `p50 ${during.p50} ms, p99 ${during.p99} ms, max ${during.max} ms, non-2xx ${during.non2xx}, 503 in the whole run ${during.unavailable} ` +
        `(target p99 < ${TARGET_P99_MS} ms and no 503: ${met ? 'met' : 'not met'}); before it p50 ${before.p50} ms, p99 ${before.p99} ms, max ${before.max} ms`,
    ];
    return { engine, removed: record.deliveries, pruneMs: record.durationMs, during, before, met, lines };
  } finally {
    stopLoad.abort();
    await running.stop();
  }
}
