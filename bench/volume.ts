/**
 * Operating at volume (contract section 19): on a store of months in production (bench/volume-seed.ts),
 * each of the relay's own heavy jobs (the retention pass, the console's 24-hour sink health, a
 * replay of a month for one sink, and the set-aside of a removed hook's backlog) beside new
 * deliveries at a steady rate; each build (this one, then each BENCH_COMPARE folder) starts from a
 * copy of the same seeded store. Prints each job's duration, the intake's latency while it ran and
 * the relay's largest resident memory meanwhile.
 */
import { copyFileSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { once } from 'node:events';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import BetterSqlite3 from 'better-sqlite3';
import pg from 'pg';
import { DAY_MS } from '../src/clock.js';
import { runLoad, summarizeAnswers, type Answer, type AnswersSummary, type LoadResult } from './load.js';
import { createDatabase, scratchDatabase } from './postgres.js';
import { freePort, runNode } from './processes.js';
import { relay, type Context } from './targets.js';
import { REMOVED_HOOK, VOLUME_HOOKS, seedPostgres, seedSqlite, setAsideRows, type VolumeShape } from './volume-seed.js';

export const VOLUME_JOBS = ['retention', 'health', 'replay', 'set-aside'] as const;
type Job = (typeof VOLUME_JOBS)[number];

export interface VolumeSettings extends VolumeShape {
  /** New deliveries a second beside each job (paced). */
  rate: number;
  /** A job still running after this long is reported as not finished, and the relay stopped. */
  jobTimeoutMs: number;
  engines: string[];
  jobs: string[];
  postgresUrl: string;
}

type Engine = 'SQLite' | 'PostgreSQL';
/** Each engine and its name in BENCH_VOLUME_ENGINES. */
const ENGINES: [Engine, string][] = [
  ['SQLite', 'sqlite'],
  ['PostgreSQL', 'postgres'],
];

interface Build {
  label: string;
  /** A built checkout (BENCH_COMPARE); this one when absent. */
  checkout?: string;
}

interface JobResult {
  engine: Engine;
  build: string;
  job: Job;
  /** Null when it did not finish within the job timeout. */
  durationMs: number | null;
  detail: string;
  intake: AnswersSummary;
  /** Requests that got no answer (refused, reset, timed out) once the relay listened. */
  errors: number;
  /** The set-aside ended before the relay listened: it held the start, every request meanwhile refused. */
  beforeListening: boolean;
  /** The same intake in the seconds before the job (none for the set-aside, which comes with the start). */
  control: AnswersSummary | undefined;
  rssMaxMb: number;
}

/** A copy of the seeded store for one run, and a way to count its rows meanwhile. */
interface StoreCopy {
  url: string;
  count(query: string): Promise<number>;
  drop(): Promise<void>;
}

interface SeededStore {
  engine: Engine;
  copy(): Promise<StoreCopy>;
  drop(): Promise<void>;
}

const ADMIN_TOKEN = randomBytes(32).toString('hex');
const CONNECTIONS = 50;
/** The intake runs this long before a job starts: its control figures. */
const LEAD_IN_MS = 5000;
/** The console refreshes its view this often (console/src/app.ts), one health request a sink. */
const CONSOLE_REFRESH_MS = 5000;
const HEALTH_ROUNDS = 4;
/** Jobs other than retention run on a relay whose retention window is longer than the store: its daily pass removes nothing. */
const RETENTION_BEYOND_STORE_DAYS = 3650;
/** The default window, which the retention job removes beyond and the replay covers. */
const RETENTION_DAYS = 30;
/** PostgreSQL replicas wait this long for a removed sink's work before setting it aside (10 minutes by default; shortened, not changed in kind). */
const SET_ASIDE_GRACE_S = 10;
const TARGET = { p99Ms: 250, maxMs: 1000, healthMs: 1000, rssMb: 512 };

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
const int = (n: number): string => Math.round(n).toLocaleString('en');

/** The build whose migrations are fewest: seeded at its schema, every other build migrates the copy further as it starts. */
function oldestSchema(ctx: Context, builds: Build[]): string {
  const count = (checkout: string) => readdirSync(join(checkout, 'migrations')).filter((f) => /^\d+_.*\.ts$/.test(f)).length;
  return builds.map((b) => b.checkout ?? ctx.root).reduce((a, b) => (count(b) < count(a) ? b : a));
}

async function seedStore(ctx: Context, engine: Engine, settings: VolumeSettings, migrateWith: string, log: (line: string) => void): Promise<SeededStore> {
  const now = Date.now();
  const began = performance.now();
  const seeded = (size: string) => log(`bench: volume: ${engine} seeded in ${((performance.now() - began) / 1000).toFixed(0)} s${size}`);
  if (engine === 'SQLite') {
    const seedFile = join(ctx.tmp, 'volume-seed.db');
    await runNode([join(migrateWith, 'bin/boxrelay.js'), 'migrate'], { BOXRELAY_DATABASE: seedFile }, ctx.root);
    await seedSqlite(seedFile, settings, now, log);
    seeded('');
    let copies = 0;
    return {
      engine,
      async copy() {
        const file = join(ctx.tmp, `volume-${++copies}.db`);
        copyFileSync(seedFile, file);
        // Opened once the relay has the file open in WAL mode.
        let reader: BetterSqlite3.Database | undefined;
        return {
          url: file,
          count: async (query) => Number(Object.values((reader ??= new BetterSqlite3(file, { readonly: true })).prepare(query).get() as object)[0]),
          async drop() {
            reader?.close();
            for (const suffix of ['', '-wal', '-shm', '-lock']) rmSync(`${file}${suffix}`, { force: true });
          },
        };
      },
      drop: async () => rmSync(seedFile, { force: true }),
    };
  }
  const template = await scratchDatabase(ctx, settings.postgresUrl, migrateWith);
  await seedPostgres(template.url, settings, now, log);
  seeded('');
  return {
    engine,
    async copy() {
      const database = await createDatabase(settings.postgresUrl, template.name);
      const reader = new pg.Client({ connectionString: database.url });
      await reader.connect();
      return {
        url: database.url,
        count: async (query) => Number(Object.values((await reader.query(query)).rows[0] as object)[0]),
        async drop() {
          await reader.end();
          await database.drop();
        },
      };
    },
    drop: () => template.drop(),
  };
}

/** A hook receiver that acknowledges at once. */
async function startHookReceiver(): Promise<{ url: string; close(): void }> {
  const server = createServer((request, response) => {
    request.resume();
    request.on('end', () => response.end());
  });
  server.keepAliveTimeout = 60_000;
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${port}/hook`,
    close() {
      server.closeAllConnections();
      server.close();
    },
  };
}

/** Resident memory of a process (VmRSS), sampled until stopped; the largest sample between two epoch ms. */
function sampleRss(pid: number): { maxMb(from: number, to: number): number; stop(): void } {
  const samples: { at: number; kb: number }[] = [];
  const sample = () => {
    try {
      const kb = Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0);
      samples.push({ at: Date.now(), kb });
    } catch {
      // The process has exited: nothing more to sample.
    }
  };
  sample();
  const timer = setInterval(sample, 200);
  return {
    maxMb: (from, to) => Math.max(0, ...samples.filter((s) => s.at >= from && s.at <= to).map((s) => s.kb)) / 1024,
    stop: () => clearInterval(timer),
  };
}

const admin = (internalPort: number, path: string, init: RequestInit = {}, timeoutMs: number) =>
  fetch(`http://127.0.0.1:${internalPort}${path}`, {
    ...init,
    headers: { Authorization: `Bearer ${ADMIN_TOKEN}`, 'Content-Type': 'application/json' },
    signal: AbortSignal.timeout(timeoutMs),
  });

/** Resolves with `promise`'s value, or `undefined` after `ms`. */
const within = <T>(promise: Promise<T>, ms: number): Promise<T | undefined> =>
  Promise.race([promise, sleep(ms).then(() => undefined)]);

interface JobSpan {
  startedAt: number;
  /** Null: not finished within the timeout. */
  endedAt: number | null;
  /** The figure reported as the job's duration, when not its span (health: the slowest answer). */
  durationMs?: number;
  detail: string;
}

/** The console's sink page, for every sink, refreshed as the console does. */
async function healthJob(internalPort: number, sinks: readonly string[], timeoutMs: number): Promise<JobSpan> {
  const startedAt = Date.now();
  let slowest = 0;
  let answers = 0;
  for (let round = 0; round < HEALTH_ROUNDS; round++) {
    const roundStart = Date.now();
    for (const sink of sinks) {
      const asked = performance.now();
      try {
        const answer = await admin(internalPort, `/admin/sinks/${sink}/health?window=24h`, {}, timeoutMs);
        if (answer.status !== 200) throw new Error(`health of ${sink} answered ${answer.status}`);
        await answer.json();
      } catch (error) {
        if (error instanceof DOMException && error.name === 'TimeoutError') {
          return { startedAt, endedAt: null, detail: `a health answer took over ${timeoutMs / 1000} s` };
        }
        throw error;
      }
      slowest = Math.max(slowest, performance.now() - asked);
      answers++;
    }
    await sleep(CONSOLE_REFRESH_MS - (Date.now() - roundStart));
  }
  return { startedAt, endedAt: Date.now(), durationMs: slowest, detail: `slowest of ${answers} answers (${sinks.length} sinks, every ${CONSOLE_REFRESH_MS / 1000} s)` };
}

/** `POST /admin/replay` of the retention window for one sink, until it answers. */
async function replayJob(internalPort: number, timeoutMs: number): Promise<JobSpan> {
  const startedAt = Date.now();
  const since = new Date(startedAt - RETENTION_DAYS * DAY_MS).toISOString();
  try {
    const answer = await admin(internalPort, '/admin/replay', { method: 'POST', body: JSON.stringify({ since, sink: VOLUME_HOOKS[0] }) }, timeoutMs);
    const body = (await answer.json()) as { queued?: number };
    if (answer.status >= 300) throw new Error(`the replay answered ${answer.status} ${JSON.stringify(body)}`);
    return { startedAt, endedAt: Date.now(), detail: `${VOLUME_HOOKS[0]}, ${RETENTION_DAYS} days: ${body.queued === undefined ? 'accepted' : `${int(body.queued)} queued`}` };
  } catch (error) {
    if (error instanceof DOMException && error.name === 'TimeoutError') return { startedAt, endedAt: null, detail: `${VOLUME_HOOKS[0]}, ${RETENTION_DAYS} days` };
    throw error;
  }
}

/** Until the removed hook's whole backlog is listed as set aside. */
async function setAsideJob(store: StoreCopy, startedAt: number, rows: number, timeoutMs: number): Promise<JobSpan> {
  const query = `SELECT count(*) AS n FROM outbox WHERE sink = '${REMOVED_HOOK}' AND status = 'set_aside'`;
  for (;;) {
    const done = await store.count(query);
    if (done >= rows) return { startedAt, endedAt: Date.now(), detail: `${int(done)} rows` };
    if (Date.now() - startedAt > timeoutMs) return { startedAt, endedAt: null, detail: `${int(done)} of ${int(rows)} rows` };
    await sleep(250);
  }
}

async function runJob(
  ctx: Context,
  store: SeededStore,
  build: Build,
  job: Job,
  settings: VolumeSettings,
  hookUrl: string,
  log: (line: string) => void,
): Promise<JobResult> {
  const copy = await store.copy();
  const postgres = store.engine === 'PostgreSQL';
  const [port, internalPort] = [await freePort(), await freePort()];
  const hooks = job === 'set-aside' ? VOLUME_HOOKS.filter((hook) => hook !== REMOVED_HOOK) : VOLUME_HOOKS;
  const hooksFile = join(ctx.tmp, `volume-hooks-${job}.json`);
  writeFileSync(hooksFile, JSON.stringify(hooks.map((name) => ({ name, url: hookUrl }))));
  const env: Record<string, string> = {
    BOXRELAY_HOOKS_FILE: hooksFile,
    BOXRELAY_INTERNAL_PORT: String(internalPort),
    BOXRELAY_ADMIN_TOKEN: ADMIN_TOKEN,
    ...(job === 'retention' ? {} : { BOXRELAY_RETENTION_DAYS: String(RETENTION_BEYOND_STORE_DAYS) }),
    ...(job === 'set-aside' && postgres ? { BOXRELAY_UNSERVED_SINK_GRACE: `${SET_ASIDE_GRACE_S}s` } : {}),
  };
  const target = relay(`volume-${job}`, `${job} (${build.label})`, ctx, {
    logLevel: 'info',
    database: () => copy.url,
    fanout: false,
    env,
    port,
    // Builds before 2026-11-26 set a removed sink's work aside on SQLite before the relay listened.
    startTimeoutMs: settings.jobTimeoutMs + 60_000,
    ...(build.checkout ? { checkout: build.checkout } : {}),
  });
  const answers: Answer[] = [];
  const erroredAt: number[] = [];
  const stopLoad = new AbortController();
  let load: Promise<LoadResult> | undefined;
  let loadStartedAt = 0;
  const startLoad = () => {
    loadStartedAt = Date.now();
    load = runLoad(port, {
      seconds: 24 * 3600,
      connections: CONNECTIONS,
      rate: settings.rate,
      signal: stopLoad.signal,
      onResponse: (status, latencyMs) => answers.push({ at: Date.now(), status, latencyMs: Math.round(latencyMs * 10) / 10 }),
      onError: () => erroredAt.push(Date.now()),
    });
  };
  // The set-aside comes with a start: the intake is aimed at the port before the relay listens (a restart's gap counts).
  if (job === 'set-aside') startLoad();
  const spawnedAt = Date.now();
  log(`bench: volume: ${store.engine}, ${build.label}: ${job}`);
  const running = await target.start();
  const listeningAt = Date.now();
  const rss = sampleRss(running.server.child.pid as number);
  try {
    const timeoutMs = settings.jobTimeoutMs;
    let span: JobSpan;
    if (job === 'retention') {
      const pass = running.server.nextLine('removed deliveries');
      startLoad();
      // The relay's own daily pass, 30 s after it starts (src/store/retention/prune-schedule.ts).
      const line = await within(pass, 30_000 + timeoutMs);
      if (line === undefined) {
        span = { startedAt: listeningAt + 30_000, endedAt: null, detail: '' };
      } else {
        const record = JSON.parse(line) as { time: string; deliveries: number; boxes: number; durationMs: number };
        const endedAt = Date.parse(record.time);
        span = { startedAt: endedAt - record.durationMs, endedAt, detail: `${int(record.deliveries)} deliveries, ${int(record.boxes)} boxes removed` };
      }
    } else {
      if (job !== 'set-aside') {
        // A quiet start: the first retention pass (nothing to remove) is over before the job.
        if ((await within(running.server.nextLine('removed deliveries'), timeoutMs)) === undefined) log(`bench: volume: the first retention pass did not end in ${timeoutMs / 1000} s`);
        startLoad();
        await sleep(LEAD_IN_MS);
      }
      span =
        job === 'health'
          ? await healthJob(internalPort, VOLUME_HOOKS, timeoutMs)
          : job === 'replay'
            ? await replayJob(internalPort, timeoutMs)
            : await setAsideJob(copy, spawnedAt + (postgres ? SET_ASIDE_GRACE_S * 1000 : 0), setAsideRows(settings), timeoutMs);
      if (job === 'set-aside') {
        const refused = erroredAt.filter((at) => at < listeningAt).length;
        span.detail += `; listening ${((listeningAt - spawnedAt) / 1000).toFixed(1)} s after start (${int(refused)} requests refused until then)`;
      }
    }
    const end = span.endedAt ?? Date.now();
    // A second more: answers held up by the job's last step arrive after it.
    await sleep(1000);
    stopLoad.abort();
    await load;
    return {
      engine: store.engine,
      build: build.label,
      job,
      durationMs: span.endedAt === null ? null : (span.durationMs ?? span.endedAt - span.startedAt),
      detail: span.detail,
      intake: summarizeAnswers(answers, span.startedAt, end + 1000),
      errors: erroredAt.filter((at) => at >= listeningAt).length,
      beforeListening: job === 'set-aside' && span.endedAt !== null && span.endedAt <= listeningAt,
      control: job === 'set-aside' ? undefined : summarizeAnswers(answers, loadStartedAt + 2000, span.startedAt - 1),
      rssMaxMb: rss.maxMb(span.startedAt, end + 1000),
    };
  } finally {
    stopLoad.abort();
    await load;
    rss.stop();
    await running.stop();
    await copy.drop();
  }
}

function verdict(r: JobResult, timeoutMs: number): string {
  if (r.durationMs === null) return `not met: did not finish in ${timeoutMs / 1000} s`;
  const misses = [
    r.intake.p99 >= TARGET.p99Ms && `p99 ≥ ${TARGET.p99Ms} ms`,
    r.intake.max > TARGET.maxMs && `an answer over ${TARGET.maxMs / 1000} s`,
    (r.intake.non2xx > 0 || r.errors > 0) && 'non-2xx or errors',
    r.beforeListening && 'set aside before the relay listened',
    r.job === 'health' && r.durationMs >= TARGET.healthMs && `health ≥ ${TARGET.healthMs / 1000} s`,
    r.rssMaxMb > TARGET.rssMb && `RSS > ${TARGET.rssMb} MB`,
  ].filter(Boolean);
  return misses.length === 0 ? 'met' : `not met: ${misses.join(', ')}`;
}

export async function runVolume(ctx: Context, settings: VolumeSettings, compare: string[], log: (line: string) => void): Promise<{ results: JobResult[]; lines: string[] }> {
  const builds: Build[] = [{ label: 'this build' }, ...compare.map((checkout) => ({ label: checkout, checkout }))];
  const jobs = VOLUME_JOBS.filter((job) => settings.jobs.includes(job));
  const engines = ENGINES.filter(([, key]) => settings.engines.includes(key)).map(([engine]) => engine);
  const migrateWith = oldestSchema(ctx, builds);
  const receiver = await startHookReceiver();
  const results: JobResult[] = [];
  try {
    for (const engine of engines) {
      log(`bench: volume: seeding ${engine}: ${int(settings.deliveries)} deliveries over ${settings.days} days, 3 attempts each`);
      const store = await seedStore(ctx, engine, settings, migrateWith, log);
      try {
        for (const job of jobs) {
          for (const build of builds) {
            const result = await runJob(ctx, store, build, job, settings, receiver.url, log);
            log(`bench: volume:   ${result.durationMs === null ? 'did not finish' : `${int(result.durationMs)} ms`}, intake p99 ${result.intake.p99} ms, max ${result.intake.max} ms, RSS ${int(result.rssMaxMb)} MB`);
            results.push(result);
          }
        }
      } finally {
        await store.drop();
      }
    }
  } finally {
    receiver.close();
  }
  const lines = [
    '## Operating at volume (contract section 19)',
    '',
    `A store of ${int(settings.deliveries)} deliveries over ${settings.days} days (${int(settings.deliveries * 3)} attempts, three hooks, ` +
      `${int(settings.backlog)} deliveries of backlog for a paused hook), seeded once per engine and copied for every run. Each job runs ` +
      `beside new deliveries at a paced ${int(settings.rate)}/s (${CONNECTIONS} connections): retention (the relay's own daily pass, ` +
      `${RETENTION_DAYS}-day window), the console's 24-hour health of every sink (${HEALTH_ROUNDS} rounds, ${CONSOLE_REFRESH_MS / 1000} s apart; ` +
      `its duration is the slowest answer), \`POST /admin/replay\` of ${RETENTION_DAYS} days for one hook (until it answers), and the ` +
      `set-aside of the paused hook's backlog when the relay starts without it (until every row is listed; the intake is aimed at the ` +
      `relay from its start: the requests refused until it listens are told apart, and a set-aside done before it listens misses the target; PostgreSQL with a ${SET_ASIDE_GRACE_S} s grace, from its end). ` +
      `Other jobs start after the relay's first retention pass (a window longer than the store: it removes nothing). Each job is ` +
      `stopped after ${settings.jobTimeoutMs / 1000} s. Intake: answers that arrived while the job ran (and 1 s after); control: the ` +
      'same intake in the seconds before it. RSS: the largest VmRSS sample while the job ran.',
    '',
    '| engine | build | job | duration | job | intake answers | p50 ms | p99 ms | max ms | non-2xx / errors once listening | control p99 / max ms | RSS max MB | target |',
    '|---|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---|',
    ...results.map(
      (r) =>
        `| ${r.engine} | ${r.build} | ${r.job} | ${r.durationMs === null ? `did not finish in ${settings.jobTimeoutMs / 1000} s` : `${(r.durationMs / 1000).toFixed(2)} s`} | ` +
        `${r.detail} | ${int(r.intake.requests)} | ${int(r.intake.p50)} | ${int(r.intake.p99)} | ${int(r.intake.max)} | ${int(r.intake.non2xx)} / ${int(r.errors)} | ` +
        `${r.control ? `${int(r.control.p99)} / ${int(r.control.max)}` : '–'} | ${int(r.rssMaxMb)} | ${verdict(r, settings.jobTimeoutMs)} |`,
    ),
    '',
    `Targets (section 19): p99 < ${TARGET.p99Ms} ms and none over ${TARGET.maxMs / 1000} s while each job runs, every request answered 2xx, ` +
      `health within ${TARGET.healthMs / 1000} s, resident memory within ${TARGET.rssMb} MB.`,
    '',
  ];
  return { results, lines };
}
