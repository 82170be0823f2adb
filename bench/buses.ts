/**
 * The buses of issue 22 (RabbitMQ, Redis Streams, MQTT): each bus alone draining a backlog (the
 * state an outage leaves: stored events with pending rows for that bus), and what one bus beside
 * NATS costs the receiver's accepted/s against NATS alone.
 */
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { connectAsync } from 'mqtt';
import { Connection } from 'rabbitmq-client';
import { join } from 'node:path';
import { backlogDatabase } from './backlog.js';
import { runLoad } from './load.js';
import { freePort } from './processes.js';
import { median } from './report.js';
import { relay, type Context } from './targets.js';

export interface BusBenchSettings {
  /** Pending rows each bus drains alone. */
  events: number;
  amqpUrl: string;
  redisUrl: string;
  mqttUrl: string;
  /** Rounds of the comparison beside NATS: each round runs NATS alone and each bus beside it in turn. */
  rounds: number;
  /** Seconds and connections of each accepted/s run (beside NATS). */
  seconds: number;
  connections: number;
  timeoutMs: number;
}

const DRAIN_TARGET = 5000;
const COST_TARGET = 0.1;

/** A bus as the bench drives it: the relay's env for names of its own, and how many messages the broker holds. */
interface BenchBus {
  name: 'amqp' | 'redis' | 'mqtt';
  label: string;
  env: Record<string, string>;
  /** Counts what reached the broker (a queue, the stream, a subscriber). */
  held(): Promise<number>;
  close(): Promise<void>;
}

async function amqpBus(url: string): Promise<BenchBus> {
  const name = `bench-${randomBytes(4).toString('hex')}`;
  const rabbit = new Connection(url);
  rabbit.on('error', () => {});
  return {
    name: 'amqp',
    label: 'RabbitMQ',
    // The relay declares the queue (bound with #), so every message is kept and counted there.
    env: { BOXRELAY_AMQP_URL: url, BOXRELAY_AMQP_EXCHANGE: name, BOXRELAY_AMQP_QUEUE: name },
    held: async () => (await rabbit.queueDeclare({ queue: name, passive: true }).catch(() => ({ messageCount: 0 }))).messageCount,
    async close() {
      await rabbit.queueDelete({ queue: name }).catch(() => {});
      await rabbit.exchangeDelete({ exchange: name }).catch(() => {});
      await rabbit.close();
    },
  };
}

async function redisBus(url: string): Promise<BenchBus> {
  const stream = `bench:${randomBytes(4).toString('hex')}`;
  const redis = new Redis(url);
  return {
    name: 'redis',
    label: 'Redis Streams',
    // A short window: the seen-keys of 100,000 events expire on their own.
    env: { BOXRELAY_REDIS_URL: url, BOXRELAY_REDIS_STREAM: stream, BOXRELAY_REDIS_MAXLEN: '0', BOXRELAY_REDIS_DUPLICATE_WINDOW: '2m' },
    held: () => redis.xlen(stream),
    async close() {
      await redis.del(stream);
      redis.disconnect();
    },
  };
}

async function mqttBus(url: string): Promise<BenchBus> {
  const prefix = `bench${randomBytes(4).toString('hex')}`;
  const client = await connectAsync(url, { protocolVersion: 5 });
  let received = 0;
  client.on('message', () => void received++);
  await client.subscribeAsync(`${prefix}/#`, { qos: 1 });
  return {
    name: 'mqtt',
    label: 'MQTT',
    env: { BOXRELAY_MQTT_URL: url, BOXRELAY_MQTT_TOPIC_PREFIX: prefix },
    held: async () => received,
    close: () => client.endAsync(true),
  };
}

/** `boxrelay_sink_deliveries_total{sink,outcome="delivered"}` from the relay's /metrics. */
async function delivered(internalPort: number, sink: string): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${internalPort}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`boxrelay_sink_deliveries_total{sink="${sink}",outcome="delivered"}`));
  return line ? Number(line.split(' ').at(-1)) : 0;
}

interface Drain {
  bus: string;
  events: number;
  seconds: number | null;
  eventsPerSecond: number | null;
  held: number;
  cpuMicrosPerEvent: number;
}

/** One bus alone (no NATS, no hook) drains `events` pending rows; timed from the relay's start. */
async function drain(ctx: Context, bus: BenchBus, settings: BusBenchSettings, log: (line: string) => void): Promise<Drain> {
  const file = join(ctx.tmp, `bus-backlog-${bus.name}.db`);
  log(`bench: buses: storing ${settings.events} events with pending ${bus.name} rows`);
  await backlogDatabase(ctx, file, settings.events, bus.name);
  const internalPort = await freePort();
  const startedNs = process.hrtime.bigint();
  const running = await relay(`bus-drain-${bus.name}`, `${bus.label} drain`, ctx, {
    logLevel: 'info',
    database: () => file,
    fanout: false,
    env: { ...bus.env, BOXRELAY_INTERNAL_PORT: String(internalPort) },
  }).start();
  try {
    const deadline = Date.now() + settings.timeoutMs;
    // The broker's count is watched first: each /metrics scrape counts the relay's backlog (CPU the
    // relay would spend on a 10 Hz poll, not on draining); the relay's own count ends the run.
    while ((await bus.held()) < settings.events && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    let count = 0;
    while ((count = await delivered(internalPort, bus.name)) < settings.events && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    const seconds = count >= settings.events ? Number(process.hrtime.bigint() - startedNs) / 1e9 : null;
    const cpuMicrosPerEvent = (running.server.cpuSeconds() * 1e6) / Math.max(1, count);
    // What the broker holds once the relay counted them all (MQTT: what the subscriber has had so far).
    const held = await bus.held();
    log(`bench: buses: ${bus.label} drained ${count} in ${seconds === null ? 'timed out' : `${seconds.toFixed(1)} s`}; the broker holds ${held}`);
    return { bus: bus.label, events: settings.events, seconds, eventsPerSecond: seconds === null ? null : settings.events / seconds, held, cpuMicrosPerEvent };
  } finally {
    await running.stop();
  }
}

/** Accepted/s of the relay with NATS and `env` (one bus beside it, or none). */
async function acceptedPerSecond(ctx: Context, key: string, env: Record<string, string>, settings: BusBenchSettings, log: (line: string) => void): Promise<number> {
  const running = await relay(key, key, ctx, { logLevel: 'info', database: () => join(ctx.tmp, `${key}-${randomBytes(3).toString('hex')}.db`), env }).start();
  try {
    await runLoad(running.server.port, { seconds: 2, connections: settings.connections });
    const result = await runLoad(running.server.port, { seconds: settings.seconds, connections: settings.connections });
    log(`bench: buses: ${key}: ${Math.round(result.acceptedPerSecond)}/s accepted, p99 ${result.p99} ms`);
    return result.acceptedPerSecond;
  } finally {
    await running.stop();
  }
}

const int = (n: number | null | undefined): string => (n == null ? '–' : Math.round(n).toLocaleString('en'));

export async function runBuses(
  ctx: Context,
  settings: BusBenchSettings,
  parts: { drain: boolean; besideNats: boolean },
  log: (line: string) => void,
): Promise<{ lines: string[] }> {
  const makers = [() => amqpBus(settings.amqpUrl), () => redisBus(settings.redisUrl), () => mqttBus(settings.mqttUrl)];
  const lines = ['## Buses: RabbitMQ, Redis Streams, MQTT', ''];
  if (parts.drain) {
    const drains: Drain[] = [];
    for (const make of makers) {
      const bus = await make();
      try {
        drains.push(await drain(ctx, bus, settings, log));
      } finally {
        await bus.close();
      }
    }
    lines.push(
      `Each bus alone (no NATS, no hook) drains ${int(settings.events)} pending rows (what an outage leaves), timed from the relay's start ` +
        'until its `sink_deliveries_total{outcome="delivered"}` reaches the backlog (the broker confirmed, answered or PUBACKed each).',
      '',
      '| bus | events/s | seconds | held by the broker | relay CPU µs/event | target |',
      '|---|---:|---:|---:|---:|---|',
      ...drains.map(
        (d) =>
          `| ${d.bus} | ${int(d.eventsPerSecond)} | ${d.seconds === null ? 'timed out' : d.seconds.toFixed(1)} | ${int(d.held)} | ${int(d.cpuMicrosPerEvent)} | ` +
          `>= ${int(DRAIN_TARGET)}/s: ${d.eventsPerSecond !== null && d.eventsPerSecond >= DRAIN_TARGET ? 'met' : 'not met'} |`,
      ),
      '',
    );
  }
  if (parts.besideNats && ctx.natsUrl) {
    // Interleaved rounds and medians: on a shared machine one run of each drifts by more than the target.
    const runs = new Map<string, number[]>();
    const record = (label: string, perSecond: number) => runs.set(label, [...(runs.get(label) ?? []), perSecond]);
    for (let round = 0; round < settings.rounds; round++) {
      record('NATS alone', await acceptedPerSecond(ctx, 'nats-alone', {}, settings, log));
      for (const make of makers) {
        const bus = await make();
        try {
          record(`NATS + ${bus.label}`, await acceptedPerSecond(ctx, `nats+${bus.name}`, bus.env, settings, log));
        } finally {
          await bus.close();
        }
      }
    }
    const alone = median(runs.get('NATS alone')!);
    const rows = [...runs].map(([label, values]) => {
      const perRound = values.map(int).join(', ');
      if (label === 'NATS alone') return `| ${label} | ${int(alone)} | ${perRound} | | |`;
      const cost = 1 - median(values) / alone;
      return `| ${label} | ${int(median(values))} | ${perRound} | ${(cost * 100).toFixed(1)} % | <= ${COST_TARGET * 100} %: ${cost <= COST_TARGET ? 'met' : 'not met'} |`;
    });
    lines.push(
      `Accepted/s of the relay (worker fan-out, SQLite) with NATS alone and with one bus beside it: ${settings.seconds} s at ` +
        `${settings.connections} connections after a 2 s warm-up, ${settings.rounds} interleaved rounds, the median of each compared.`,
      '',
      '| sinks | accepted/s, median | each round | cost vs NATS alone | target |',
      '|---|---:|---:|---:|---|',
      ...rows,
      '',
    );
  } else if (parts.besideNats) lines.push('No NATS server: the comparison beside NATS is skipped.', '');
  return { lines };
}
