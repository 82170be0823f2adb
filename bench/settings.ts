import type { BacklogSettings } from './backlog.js';
import type { TransformDrainSettings } from './transform-drain.js';
import type { BusBenchSettings } from './buses.js';
import type { LogReadSettings } from './log-reads.js';
import type { ReplaySettings } from './replay.js';
import type { IndexSettings } from './indexes.js';
import type { VolumeSettings } from './volume.js';

/** Bench settings: env vars (BENCH_SECONDS=3) or flags (--seconds=3), flags winning. */
export interface Settings {
  /** Measured seconds of load per target. */
  seconds: number;
  /** Unmeasured load before each measurement (JIT, caches, connections). */
  warmup: number;
  connections: number;
  /** Deliveries already stored for the growth run; 0 skips it. */
  prefill: number;
  /** A pre-filled file kept between runs (made on the first): quick growth experiments, not for figures. */
  prefillCache: string | undefined;
  /** How many times the baselines and the relay are measured back to back. */
  rounds: number;
  /** Also measure the relay at LOG_LEVEL=warn (no per-delivery line), for the cost of logging. */
  logCost: boolean;
  natsUrl: string;
  /** Longest wait for NATS to hold every event. */
  fanoutTimeoutMs: number;
  /** Run each target under `node --cpu-prof` and keep the profiles here. */
  profileDir: string | undefined;
  /** Where the markdown report goes. */
  results: string | undefined;
  /** Other built checkouts of boxrelay (comma list), each measured after the relay in every round (A/B of a change). */
  compare: string[];
  /** Prune under load (bench/prune-under-load.ts): expired rows, recent rows, fixed rate, and a PostgreSQL URL to run it on instead of SQLite. */
  pruneLoad: { rows: number; recent: number; rate: number; connections: number; database: string | undefined };
  /** Only these targets (comma list of http, express, express-commit, relay, relay-compare-N, relay-quiet, relay-traced, relay-per-box, relay-failed-attempts, relay-inline, relay-no-sink, relay-grown, relay-grown-compare-N, stats (the 24-hour stats query on the pre-filled file), prune-load, receive-steps, backlog, backlog-count (a scrape's backlog count, first and next), attempts (recording attempts: the hook drain, all against failed), attempts-postgres (CPU per success written down on PostgreSQL), transform-drain, postgres, bus-drain, bus-beside-nats, replay, log-reads, indexes, volume, accounts (1 account against 10, at one named account's endpoint)). */
  only: string[] | undefined;
  /** A PostgreSQL server for the PostgreSQL runs (`only`: `postgres`); each run creates and drops a database of its own. */
  postgresUrl: string;
  /** A hook's drain with and without a PagerDuty-shaped transform (bench/transform-drain.ts); `only` names it `transform-drain`. */
  transformDrain: TransformDrainSettings;
  /** The backlog drains (bench/backlog.ts); `only` names them `backlog`. */
  backlog: BacklogSettings;
  /** The buses (bench/buses.ts); `only` names them `bus-drain` (each bus alone drains a backlog) and `bus-beside-nats`. */
  buses: BusBenchSettings;
  /** A replay under load on SQLite and PostgreSQL (bench/replay.ts); `only` names it `replay`. */
  replay: ReplaySettings;
  /** What the fan-out reads of the log, hooks on replicas sharing PostgreSQL (bench/log-reads.ts); `only` names it `log-reads`. */
  logReads: LogReadSettings;
  /** What each index costs a stored delivery (bench/indexes.ts); `only` names it `indexes`. */
  indexes: IndexSettings;
  /**
   * Operating at volume (bench/volume.ts); `only` names it `volume`: a seeded store of `volume-deliveries` over `volume-days`
   * (`volume-backlog` of them unread by a paused hook; default a tenth), the jobs `volume-jobs` on `volume-engines`, each
   * beside intake at `volume-rate`/s and stopped after `volume-job-timeout` s.
   */
  volume: VolumeSettings;
}

const DEFAULTS = {
  seconds: '10',
  warmup: '2',
  connections: '50',
  prefill: '10000000',
  rounds: '1',
  'log-cost': '1',
  'nats-url': 'nats://127.0.0.1:4222',
  'fanout-timeout': '30',
  'postgres-url': 'postgres://postgres@127.0.0.1:5432/postgres',
  backlog: '600000',
  'backlog-rate': '1000',
  'hook-backlog': '50000',
  'hook-concurrency': '1,4,16,64',
  'transform-backlog': '20000',
  'transform-rounds': '4',
  'transform-concurrency': '16',
  'backlog-timeout': '900',
  'bus-backlog': '100000',
  'bus-drains': 'amqp,redis,mqtt,kafka,sqs,sns,s3',
  'bus-rounds': '4',
  'amqp-url': 'amqp://guest:guest@127.0.0.1:5672',
  'redis-url': 'redis://127.0.0.1:6379',
  'mqtt-url': 'mqtt://127.0.0.1:1883',
  'prune-rows': '300000',
  'prune-recent': '1000000',
  'prune-rate': '300',
  replay: '600000',
  'replay-rate': '100',
  'log-reads': '5000',
  'log-reads-hooks': '10',
  'log-reads-replicas': '2',
  'index-deliveries': '20000',
  'index-stored': '1000000',
  'index-rounds': '5',
  'index-engines': 'sqlite,postgres',
  'volume-deliveries': '1000000',
  'volume-days': '60',
  'volume-rate': '100',
  'volume-job-timeout': '120',
  'volume-engines': 'sqlite,postgres',
  'volume-jobs': 'retention,health,replay,set-aside',
};

export function readSettings(argv: string[], env: NodeJS.ProcessEnv): Settings {
  const flags = new Map<string, string>();
  for (const arg of argv) {
    const match = /^--([a-z-]+)(?:=(.*))?$/.exec(arg);
    if (!match) throw new Error(`unknown argument ${arg} (use --name=value)`);
    flags.set(match[1] as string, match[2] ?? '1');
  }
  const get = (name: string): string | undefined =>
    flags.get(name) ?? env[`BENCH_${name.toUpperCase().replaceAll('-', '_')}`] ?? DEFAULTS[name as keyof typeof DEFAULTS];
  const num = (name: string): number => {
    const value = Number(get(name));
    if (!Number.isFinite(value) || value < 0) throw new Error(`--${name} must be a non-negative number`);
    return value;
  };
  return {
    seconds: Math.max(1, num('seconds')),
    warmup: num('warmup'),
    connections: Math.max(1, num('connections')),
    prefill: Math.floor(num('prefill')),
    prefillCache: get('prefill-cache'),
    rounds: Math.max(1, Math.floor(num('rounds'))),
    logCost: get('log-cost') !== '0',
    natsUrl: get('nats-url') as string,
    fanoutTimeoutMs: num('fanout-timeout') * 1000,
    profileDir: get('profile'),
    results: get('results'),
    compare: get('compare')?.split(',').map((s) => s.trim()) ?? [],
    pruneLoad: {
      rows: Math.floor(num('prune-rows')),
      recent: Math.floor(num('prune-recent')),
      rate: Math.max(1, num('prune-rate')),
      connections: Math.max(1, num('connections')),
      database: get('prune-database'),
    },
    only: get('only')?.split(',').map((s) => s.trim()),
    postgresUrl: get('postgres-url') as string,
    backlog: {
      events: Math.floor(num('backlog')),
      rate: num('backlog-rate'),
      hookEvents: Math.floor(num('hook-backlog')),
      hookConcurrency: get('hook-concurrency')?.split(',').filter(Boolean).map(Number) ?? [],
      timeoutMs: num('backlog-timeout') * 1000,
    },
    transformDrain: {
      events: Math.floor(num('transform-backlog')),
      rounds: Math.max(1, Math.floor(num('transform-rounds'))),
      concurrency: Math.max(1, Math.floor(num('transform-concurrency'))),
      timeoutMs: num('backlog-timeout') * 1000,
    },
    buses: {
      events: Math.floor(num('bus-backlog')),
      drains: (get('bus-drains') as string).split(',').map((name) => name.trim()),
      rounds: Math.max(1, Math.floor(num('bus-rounds'))),
      amqpUrl: get('amqp-url') as string,
      redisUrl: get('redis-url') as string,
      mqttUrl: get('mqtt-url') as string,
      seconds: Math.max(1, num('seconds')),
      connections: Math.max(1, num('connections')),
      timeoutMs: num('backlog-timeout') * 1000,
      compare: get('compare')?.split(',').map((s) => s.trim()) ?? [],
    },
    replay: {
      events: Math.max(1, Math.floor(num('replay'))),
      rate: Math.max(1, num('replay-rate')),
      postgresUrl: get('postgres-url') as string,
    },
    logReads: {
      events: Math.max(1, Math.floor(num('log-reads'))),
      hooks: Math.max(1, Math.floor(num('log-reads-hooks'))),
      replicas: Math.max(1, Math.floor(num('log-reads-replicas'))),
      postgresUrl: get('postgres-url') as string,
    },
    indexes: {
      deliveries: Math.max(1, Math.floor(num('index-deliveries'))),
      stored: Math.floor(num('index-stored')),
      concurrency: Math.max(1, num('connections')),
      rounds: Math.max(1, Math.floor(num('index-rounds'))),
      engines: (get('index-engines') as string).split(',').map((e) => e.trim()),
      postgresUrl: get('postgres-url') as string,
    },
    volume: volumeSettings(num, get),
  };
}

function volumeSettings(num: (name: string) => number, get: (name: string) => string | undefined): VolumeSettings {
  const deliveries = Math.max(100, Math.floor(num('volume-deliveries')));
  const list = (name: string) => (get(name) as string).split(',').map((e) => e.trim());
  return {
    deliveries,
    days: Math.max(1, num('volume-days')),
    backlog: Math.min(deliveries, Math.floor(get('volume-backlog') === undefined ? deliveries / 10 : num('volume-backlog'))),
    rate: Math.max(1, num('volume-rate')),
    jobTimeoutMs: num('volume-job-timeout') * 1000,
    engines: list('volume-engines'),
    jobs: list('volume-jobs'),
    postgresUrl: get('postgres-url') as string,
  };
}
