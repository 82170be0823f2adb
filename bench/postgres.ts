/**
 * The relay on PostgreSQL: against the SQLite relay under the same load, and two
 * replicas on one database against one, each run on a database of its own, checked for loss.
 */
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import pg from 'pg';
import { openDatabase } from '../src/store/engines/database.js';
import { createFanoutStore } from '../src/store/fanout-store.js';
import { FanoutCounter } from './fanout.js';
import { runLoad, type LoadResult } from './load.js';
import { cpuSecondsOfNamed, machineBusySeconds, runNode, type Spawned } from './processes.js';
import { relay, type Context, type Running } from './targets.js';

export interface PostgresSettings {
  /** The server: a database of its own is created and dropped for each run. */
  url: string;
  seconds: number;
  connections: number;
  fanoutTimeoutMs: number;
}

interface Run {
  label: string;
  load: LoadResult;
  /** The relays' CPU time per 2xx, all replicas together. */
  cpuMicrosPerRequest: number;
  /** Busy CPU of the whole machine per 2xx: the PostgreSQL server, the load generator and NATS included. */
  machineMicrosPerRequest: number;
  /** CPU of the local PostgreSQL server's processes per 2xx (0 for SQLite, or a server elsewhere). */
  serverMicrosPerRequest: number;
  /** Set on PostgreSQL runs with NATS: what the database and the stream hold afterwards. */
  check?: { stored: number; accepted: number; pending: number; inStream: number; published: number; lost: boolean };
}

const PG_TARGET = 0.5;
const REPLICAS_TARGET = 1.0;

function merged(loads: LoadResult[]): LoadResult {
  const sum = (f: (l: LoadResult) => number) => loads.reduce((s, l) => s + f(l), 0);
  return {
    accepted: sum((l) => l.accepted),
    acceptedPerSecond: sum((l) => l.acceptedPerSecond),
    non2xx: sum((l) => l.non2xx),
    errors: sum((l) => l.errors),
    // The worse of the parts: a merged percentile is not known.
    p50: Math.max(...loads.map((l) => l.p50)),
    p99: Math.max(...loads.map((l) => l.p99)),
    max: Math.max(...loads.map((l) => l.max)),
    startedNs: loads.map((l) => l.startedNs).reduce((a, b) => (a < b ? a : b)),
    lastOkNs: loads.map((l) => l.lastOkNs).reduce((a, b) => (a > b ? a : b)),
  };
}

/** A fresh database on the server, migrated (by the relay in `checkout`, this one unless given); dropped by the returned function. */
export async function scratchDatabase(
  ctx: Context,
  serverUrl: string,
  checkout = ctx.root,
): Promise<{ name: string; url: string; drop(): Promise<void> }> {
  const database = await createDatabase(serverUrl);
  await runNode([join(checkout, 'bin/boxrelay.js'), 'migrate'], { BOXRELAY_DATABASE: database.url }, ctx.root);
  return database;
}

/** An empty database on the server (a copy of `template` when given: `CREATE DATABASE ... TEMPLATE`), dropped by the returned function. */
export async function createDatabase(serverUrl: string, template?: string): Promise<{ name: string; url: string; drop(): Promise<void> }> {
  const name = `bench_${randomBytes(6).toString('hex')}`;
  const admin = new pg.Client({ connectionString: serverUrl });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE ${name}${template === undefined ? '' : ` TEMPLATE ${template}`}`);
  } finally {
    await admin.end();
  }
  const url = new URL(serverUrl);
  url.pathname = `/${name}`;
  return {
    name,
    url: url.href,
    async drop() {
      const client = new pg.Client({ connectionString: serverUrl });
      await client.connect();
      await client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await client.end();
    },
  };
}

/**
 * `replicas` relays on one database, publishing to one stream, the load split evenly across them
 * (one autocannon each, in parallel). Afterwards: every 2xx stored, nothing pending, and NATS holding
 * each stored event once.
 */
async function measureReplicas(ctx: Context, settings: PostgresSettings, replicas: number, log: (line: string) => void): Promise<Run> {
  const database = await scratchDatabase(ctx, settings.url);
  const tag = randomBytes(4).toString('hex');
  const prefix = `bench_pg_${tag}`;
  const stream = `BENCH_PG_${tag}`.toUpperCase();
  const counter = ctx.natsUrl ? await FanoutCounter.start(ctx.natsUrl, prefix) : undefined;
  const nats: Record<string, string> = ctx.natsUrl
    ? { BOXRELAY_NATS_URL: ctx.natsUrl, BOXRELAY_NATS_SUBJECT_PREFIX: prefix, BOXRELAY_NATS_STREAM: stream }
    : {};
  const running: Running[] = [];
  try {
    for (let i = 0; i < replicas; i++) {
      const target = relay(`postgres-${replicas}-${i + 1}`, `relay on PostgreSQL, replica ${i + 1} of ${replicas}`, ctx, {
        logLevel: 'info',
        database: () => database.url,
        fanout: false,
        env: nats,
      });
      running.push(await target.start());
    }
    const servers: Spawned[] = running.map((r) => r.server);
    const connections = Math.max(1, Math.round(settings.connections / replicas));
    const warmup = merged(await Promise.all(servers.map((s) => runLoad(s.port, { seconds: 2, connections }))));
    const [cpuBefore, machineBefore, serverBefore] = [servers.reduce((sum, s) => sum + s.cpuSeconds(), 0), machineBusySeconds(), cpuSecondsOfNamed('postgres')];
    log(`bench: PostgreSQL, ${replicas} replica(s): ${settings.seconds} s at ${connections} connections each`);
    const load = merged(await Promise.all(servers.map((s) => runLoad(s.port, { seconds: settings.seconds, connections }))));
    const cpuSeconds = servers.reduce((sum, s) => sum + s.cpuSeconds(), 0) - cpuBefore;
    const machineSeconds = machineBusySeconds() - machineBefore;
    const run: Run = {
      label: `${replicas} replica(s) on PostgreSQL`,
      load,
      cpuMicrosPerRequest: (cpuSeconds * 1e6) / Math.max(1, load.accepted),
      machineMicrosPerRequest: (machineSeconds * 1e6) / Math.max(1, load.accepted),
      serverMicrosPerRequest: ((cpuSecondsOfNamed('postgres') - serverBefore) * 1e6) / Math.max(1, load.accepted),
    };
    if (counter) run.check = await checkLoss(ctx.natsUrl as string, database.url, stream, counter, settings.fanoutTimeoutMs, warmup.accepted + load.accepted);
    return run;
  } finally {
    for (const r of running) await r.stop();
    await counter?.stop(stream);
    await database.drop();
  }
}

/** Waits until nothing is pending (or the timeout), then compares the database, the stream and what was published. */
async function checkLoss(
  natsUrl: string,
  databaseUrl: string,
  stream: string,
  counter: FanoutCounter,
  timeoutMs: number,
  accepted: number,
): Promise<NonNullable<Run['check']>> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    const count = async (query: string) => Number((await client.query<{ n: string }>(query)).rows[0]?.n);
    // Pending as the relay counts it: outbox rows, and the log past each sink's cursors.
    const database = openDatabase({ url: databaseUrl });
    const pendingNow = async () => Object.values(await createFanoutStore(database).exceptions.countBySink('pending')).reduce((sum, n) => sum + n, 0);
    const deadline = Date.now() + timeoutMs;
    let pending = await pendingNow();
    while (pending > 0 && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 200));
      pending = await pendingNow();
    }
    await database.close();
    const stored = await count('SELECT count(*) AS n FROM deliveries');
    const published = await counter.count();
    const nc = await connect({ servers: natsUrl });
    const inStream = (await (await jetstreamManager(nc)).streams.info(stream)).state.messages;
    await nc.close();
    // Lost: a 2xx (warm-up included) not stored, work left pending, or a stored event not in the stream once.
    return { stored, accepted, pending, inStream, published, lost: stored < accepted || pending > 0 || inStream !== stored };
  } finally {
    await client.end();
  }
}

/** The SQLite relay under the same load, for the ratio (its own database file). */
async function measureSqlite(ctx: Context, settings: PostgresSettings): Promise<Run> {
  const target = relay('postgres-sqlite', 'relay on SQLite', ctx, { logLevel: 'info', database: () => join(ctx.tmp, `pg-compare-${randomBytes(4).toString('hex')}.db`) });
  const running = await target.start();
  try {
    await runLoad(running.server.port, { seconds: 2, connections: settings.connections });
    const [cpuBefore, machineBefore] = [running.server.cpuSeconds(), machineBusySeconds()];
    const load = await runLoad(running.server.port, { seconds: settings.seconds, connections: settings.connections });
    return {
      label: 'relay on SQLite',
      load,
      cpuMicrosPerRequest: ((running.server.cpuSeconds() - cpuBefore) * 1e6) / Math.max(1, load.accepted),
      machineMicrosPerRequest: ((machineBusySeconds() - machineBefore) * 1e6) / Math.max(1, load.accepted),
      serverMicrosPerRequest: 0,
    };
  } finally {
    await running.stop();
  }
}

const int = (n: number): string => Math.round(n).toLocaleString('en');
const met = (ok: boolean): string => (ok ? 'met' : 'not met');

export async function runPostgres(ctx: Context, settings: PostgresSettings, log: (line: string) => void): Promise<{ runs: Run[]; lines: string[] }> {
  const sqlite = await measureSqlite(ctx, settings);
  const one = await measureReplicas(ctx, settings, 1, log);
  const two = await measureReplicas(ctx, settings, 2, log);
  const runs = [sqlite, one, two];
  const pgRatio = one.load.acceptedPerSecond / sqlite.load.acceptedPerSecond;
  const replicaRatio = two.load.acceptedPerSecond / one.load.acceptedPerSecond;
  const lines = [
    '## PostgreSQL',
    '',
    `Same load as the relay target (autocannon, ${settings.connections} connections in all, ${settings.seconds} s after 2 s of warm-up), NATS on; ` +
      'each PostgreSQL run on a database of its own (local server, synchronous_commit on). Two replicas: one database, one stream, ' +
      `${Math.round(settings.connections / 2)} connections on each.`,
    '',
    '| run | accepted/s (2xx) | p50 ms | p99 ms | max ms | non-2xx | errors | CPU µs/2xx (all replicas) | PostgreSQL server CPU µs/2xx | machine CPU µs/2xx | stored / 2xx (warm-up included) | on NATS (stream / published) | pending after |',
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---:|',
    ...runs.map(
      (r) =>
        `| ${r.label} | ${int(r.load.acceptedPerSecond)} | ${r.load.p50} | ${r.load.p99} | ${r.load.max} | ${int(r.load.non2xx)} | ${int(r.load.errors)} | ` +
        `${int(r.cpuMicrosPerRequest)} | ${r.serverMicrosPerRequest ? int(r.serverMicrosPerRequest) : ''} | ${int(r.machineMicrosPerRequest)} | ${r.check ? `${int(r.check.stored)} / ${int(r.check.accepted)}` : ''} | ` +
        `${r.check ? `${int(r.check.inStream)} / ${int(r.check.published)}` : ''} | ${r.check ? int(r.check.pending) : ''} |`,
    ),
    '',
    `- relay on PostgreSQL / relay on SQLite: ${pgRatio.toFixed(2)} (target >= ${PG_TARGET}: ${met(pgRatio >= PG_TARGET)})`,
    `- two replicas / one replica: ${replicaRatio.toFixed(2)} (target >= ${REPLICAS_TARGET.toFixed(1)}: ${met(replicaRatio >= REPLICAS_TARGET)})`,
    ...[one, two].flatMap((r) =>
      r.check
        ? [`- ${r.label}: ${r.check.lost ? 'LOSS: a 2xx not stored, work left pending or a stored event not on NATS once' : 'nothing lost: every 2xx stored, nothing pending, NATS holds each stored event once'}`]
        : [`- ${r.label}: no NATS, loss not checked`],
    ),
    '',
  ];
  return { runs, lines };
}
