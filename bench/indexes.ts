/**
 * What each index costs a stored delivery (issue 36, item 2): deliveries stored through the real
 * delivery writer (SQLite: synchronous=FULL and its group commit; PostgreSQL: the pooled writer and
 * the sequencer), `concurrency` in flight as a loaded receiver has them, into a database already
 * holding `stored` deliveries. Each index of `deliveries` and `boxes` is dropped in turn from a fresh
 * copy, and the newest migration is undone, so the figures read as the schema before it. Printed
 * only: CPU µs, bytes written (SQLite) and deliveries/s; the runs alternate, as this machine drifts.
 */
import { copyFileSync, readFileSync, rmSync } from 'node:fs';
import { loadavg } from 'node:os';
import BetterSqlite3 from 'better-sqlite3';
import { join } from 'node:path';
import { sql, type Kysely } from 'kysely';
import pg from 'pg';
import { migrations } from '../migrations/index.js';
import { DAY_MS } from '../src/clock.js';
import { parseEvent } from '../src/events/parse-event.js';
import { openMigrated } from '../src/store/engines/migrate.js';
import { openStore, type Store } from '../src/store/store.js';
import type { NewDelivery } from '../src/store/write/delivery-sql.js';
import { BODY_BYTES, eventBody, newEventId } from './deliveries.js';
import { prefill } from './prefill.js';
import { cpuSecondsOf } from './processes.js';
import { postgresWithEvents } from './replay.js';
import type { Context } from './targets.js';

export interface IndexSettings {
  /** Deliveries stored per run. */
  deliveries: number;
  /** Deliveries already in the database (the random-insert indexes cost more as they grow). */
  stored: number;
  /** Deliveries in flight: the group commit's batch on SQLite, the pool's load on PostgreSQL. */
  concurrency: number;
  rounds: number;
  /** `sqlite`, `postgres` or both. */
  engines: string[];
  /** A PostgreSQL server for the runs there: a database of its own is created and dropped. */
  postgresUrl: string;
}

/** A schema variant: what is done to a fresh copy of the template before the run. */
interface Variant {
  label: string;
  apply(kysely: Kysely<unknown>): Promise<void>;
}

interface Run {
  cpuMicros: number;
  bytes: number | null;
  perSecond: number;
}

const TABLES = ['deliveries', 'boxes'];
/** Read by the write path itself (the log's head; the sequencer's queue): without them each delivery scans the table. */
const WRITE_PATH_READS = ['deliveries_log', 'deliveries_unsequenced'];
const newest = Object.keys(migrations).at(-1) as string;

function variantsOf(indexes: string[]): Variant[] {
  const down = migrations[newest]?.down;
  return [
    { label: 'as migrated', apply: async () => {} },
    ...(down ? [{ label: `${newest} undone`, apply: (kysely: Kysely<unknown>) => down(kysely) }] : []),
    ...indexes.filter((name) => !WRITE_PATH_READS.includes(name)).map((name) => ({ label: `without ${name}`, apply: (kysely: Kysely<unknown>) => kysely.schema.dropIndex(name).execute() })),
  ];
}

/** The deliveries of one run, parsed before the clock starts: the store's work alone is measured. */
function newDeliveries(count: number, offset: number): NewDelivery[] {
  return Array.from({ length: count }, (_, i) => {
    const id = newEventId();
    const { body } = eventBody(id, offset + i, new Date().toISOString(), BODY_BYTES);
    return { event: parseEvent(Buffer.from(body), id), receivedAt: Date.now(), attempt: 1, sinks: ['nats'] };
  });
}

/** Bytes the main thread handed to write() so far: on SQLite the WAL frames each commit syncs (the checkpointer's thread not counted). */
const writtenBytes = (): number => Number(/wchar: (\d+)/.exec(readFileSync(`/proc/self/task/${process.pid}/io`, 'utf8'))?.[1]);

async function store(deliveries: NewDelivery[], writer: Store['writer'], concurrency: number): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < deliveries.length) await writer.record(deliveries[next++] as NewDelivery);
    }),
  );
}

/** CPU seconds of the server processes serving this database (the pool's and the sequencer's connections). */
async function backendSeconds(store: Store): Promise<number> {
  const { rows } = await sql<{ pid: number }>`SELECT pid FROM pg_stat_activity WHERE datname = current_database()`.execute(store.database.kysely);
  return rows.reduce((sum, { pid }) => sum + cpuSecondsOf(pid), 0);
}

/** One variant, one run: the CPU is this process's, with the server's backends on PostgreSQL (its shared background writers not counted). */
async function measure(url: string, variant: Variant, settings: IndexSettings, round: number): Promise<Run> {
  const opened = await openStore({ url });
  try {
    await variant.apply(opened.database.kysely as unknown as Kysely<unknown>);
    const sqlite = opened.database.dialect === 'sqlite';
    const warm = newDeliveries(Math.min(2000, settings.deliveries), round * 1e7);
    const measured = newDeliveries(settings.deliveries, round * 1e7 + warm.length);
    await store(warm, opened.writer, settings.concurrency);
    const server = sqlite ? 0 : await backendSeconds(opened);
    const [cpu, bytes, started] = [process.cpuUsage(), writtenBytes(), performance.now()];
    await store(measured, opened.writer, settings.concurrency);
    // PostgreSQL numbers after commit: a delivery costs its numbering too.
    while ((await opened.sequenceLog()) > 0);
    const seconds = (performance.now() - started) / 1000;
    const used = process.cpuUsage(cpu);
    const cpuSeconds = (used.user + used.system) / 1e6 + (sqlite ? 0 : (await backendSeconds(opened)) - server);
    return {
      cpuMicros: (cpuSeconds * 1e6) / measured.length,
      bytes: sqlite ? (writtenBytes() - bytes) / measured.length : null,
      perSecond: measured.length / seconds,
    };
  } finally {
    await opened.close();
  }
}

const median = (values: number[]): number => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] as number;
};

function table(engine: string, variants: Variant[], runs: Run[][]): string[] {
  const base = runs[0] as Run[];
  const int = (n: number) => Math.round(n).toLocaleString('en');
  return [
    `### ${engine}`,
    '',
    '| schema | CPU µs/delivery (median) | Δ vs as migrated | WAL bytes/delivery | deliveries/s (median) |',
    '|---|---:|---:|---:|---:|',
    ...variants.map((variant, i) => {
      const mine = runs[i] as Run[];
      const cpu = median(mine.map((r) => r.cpuMicros));
      const bytes = mine[0]?.bytes === null ? '–' : int(median(mine.map((r) => r.bytes as number)));
      return `| ${variant.label} | ${int(cpu)} | ${i === 0 ? '' : int(cpu - median(base.map((r) => r.cpuMicros)))} | ${bytes} | ${int(median(mine.map((r) => r.perSecond)))} |`;
    }),
    '',
  ];
}

/** Every variant once per round, each on a fresh copy of the template (`copy` gives its URL). */
async function rounds(variants: Variant[], settings: IndexSettings, copy: (i: number) => Promise<{ url: string; drop(): Promise<void> }>, log: (line: string) => void): Promise<Run[][]> {
  const runs: Run[][] = variants.map(() => []);
  for (let round = 0; round < settings.rounds; round++) {
    // Each round starts one variant later, so none always runs first after the template is made.
    for (let k = 0; k < variants.length; k++) {
      const i = (k + round) % variants.length;
      const variant = variants[i] as Variant;
      const target = await copy(i);
      try {
        const run = await measure(target.url, variant, settings, round);
        (runs[i] as Run[]).push(run);
        log(`bench: indexes, ${variant.label}: ${Math.round(run.cpuMicros)} µs, ${Math.round(run.perSecond)}/s`);
      } finally {
        await target.drop();
      }
    }
  }
  return runs;
}

async function sqliteRuns(ctx: Context, settings: IndexSettings, log: (line: string) => void): Promise<string[]> {
  const template = join(ctx.tmp, 'indexes-template.db');
  await (await openMigrated({ url: template })).database.close();
  const end = Date.now() - 60_000;
  if (settings.stored > 0) prefill(template, [{ count: settings.stored, from: end - 29 * DAY_MS, to: end }]);
  const variants = variantsOf(readIndexNames(template));
  const runs = await rounds(
    variants,
    settings,
    async (i) => {
      const file = join(ctx.tmp, `indexes-${i}.db`);
      copyFileSync(template, file);
      return { url: file, drop: async () => rmSync(file, { force: true }) };
    },
    log,
  );
  rmSync(template, { force: true });
  return table('SQLite (synchronous=FULL, group commit)', variants, runs);
}

async function postgresRuns(ctx: Context, settings: IndexSettings, log: (line: string) => void): Promise<string[]> {
  const template = await postgresWithEvents(ctx, settings.postgresUrl, Math.max(1, settings.stored));
  const templateName = new URL(template.url).pathname.slice(1);
  const client = new pg.Client({ connectionString: template.url });
  await client.connect();
  const { rows } = await client.query<{ indexname: string }>(
    `SELECT indexname FROM pg_indexes i WHERE schemaname = current_schema() AND tablename = ANY($1)
     AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conname = i.indexname) ORDER BY tablename, indexname`,
    [TABLES],
  );
  await client.end();
  const variants = variantsOf(rows.map((r) => r.indexname));
  const server = new pg.Client({ connectionString: settings.postgresUrl });
  await server.connect();
  try {
    const runs = await rounds(
      variants,
      settings,
      async (i) => {
        const name = `${templateName}_v${i}`;
        // A file copy: the default strategy writes the whole database to the WAL.
        await server.query(`CREATE DATABASE ${name} TEMPLATE ${templateName} STRATEGY FILE_COPY`);
        const url = new URL(template.url);
        url.pathname = `/${name}`;
        return { url: url.href, drop: async () => void (await server.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)) };
      },
      log,
    );
    return table('PostgreSQL (pooled writer and sequencer; CPU of this process and its backends)', variants, runs);
  } finally {
    await server.end();
    await template.drop();
  }
}

/** The named indexes of the measured tables (SQLite's automatic ones, the primary keys, cannot be dropped). */
function readIndexNames(file: string): string[] {
  const db = new BetterSqlite3(file, { readonly: true });
  try {
    const rows = db
      .prepare(`SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL AND tbl_name IN (${TABLES.map(() => '?').join(', ')}) ORDER BY tbl_name, name`)
      .all(...TABLES) as { name: string }[];
    return rows.map((r) => r.name);
  } finally {
    db.close();
  }
}

export async function runIndexes(ctx: Context, settings: IndexSettings, log: (line: string) => void): Promise<{ lines: string[] }> {
  const load = loadavg()[0] as number;
  log(`bench: indexes, ${settings.deliveries.toLocaleString('en')} deliveries per run on ${settings.stored.toLocaleString('en')} stored`);
  const lines = [
    '## What each index costs a stored delivery',
    '',
    `${settings.deliveries.toLocaleString('en')} deliveries per run (1 KiB bodies, ${settings.concurrency} in flight) through the delivery writer ` +
      `into a database holding ${settings.stored.toLocaleString('en')}, each schema on a fresh copy, ${settings.rounds} rounds in turn ` +
      `(load average ${load.toFixed(2)} at the start). Δ: what the index costs (negative: dropping it saves that much). ` +
      `Not dropped: ${WRITE_PATH_READS.join(', ')}, which the write path reads itself.`,
    '',
    ...(settings.engines.includes('sqlite') ? await sqliteRuns(ctx, settings, log) : []),
    ...(settings.engines.includes('postgres') ? await postgresRuns(ctx, settings, log) : []),
  ];
  return { lines };
}
