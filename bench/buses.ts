/**
 * The buses of contract sections 12, 18 and 20 (RabbitMQ, Redis Streams, MQTT, Kafka, SQS, SNS, the
 * S3 archive): each bus alone draining a backlog (the state an outage leaves: stored events with
 * pending rows for that bus), and what one bus beside NATS costs the receiver's accepted/s against
 * NATS alone (not Kafka nor AWS: their brokers here are stand-ins, librdkafka's mock cluster and
 * fauxqs, whose cost says nothing about the real ones).
 */
import { execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { createInterface } from 'node:readline';
import { promisify } from 'node:util';
import { CreateBucketCommand, GetObjectCommand, ListObjectsV2Command, S3Client } from '@aws-sdk/client-s3';
import { CreateTopicCommand, SNSClient, SubscribeCommand } from '@aws-sdk/client-sns';
import { CreateQueueCommand, GetQueueAttributesCommand, SQSClient } from '@aws-sdk/client-sqs';
import { gunzipSync } from 'node:zlib';
import { Kafka, logLevel } from 'kafkajs';
import { Redis } from 'ioredis';
import { connectAsync } from 'mqtt';
import { Connection } from 'rabbitmq-client';
import { join } from 'node:path';
import { backlogDatabase } from './backlog.js';
import { runLoad } from './load.js';
import { cpuSecondsOf, cpuSecondsOfNamed, freePort, machineBusySeconds } from './processes.js';
import { median } from './report.js';
import { relay, type Context, type Running } from './targets.js';

export interface BusBenchSettings {
  /** Pending rows each bus drains alone. */
  events: number;
  /** The buses that drain (`bus-drain`), by sink name. */
  drains: string[];
  amqpUrl: string;
  redisUrl: string;
  mqttUrl: string;
  /** Other built checkouts (BENCH_COMPARE): each drains after this one, for an A/B of a change. */
  compare: string[];
  /** Pairs of load slices (NATS alone, NATS with the bus) in the comparison beside NATS. */
  rounds: number;
  /** Seconds and connections of each load slice (beside NATS). */
  seconds: number;
  connections: number;
  timeoutMs: number;
}

const DRAIN_TARGET = 5000;
const COST_TARGET = 0.1;

/** A bus as the bench drives it: the relay's env for names of its own, and how many messages the broker holds. */
interface BenchBus {
  name: 'amqp' | 'redis' | 'mqtt' | 'kafka' | 'sqs' | 'sns' | 's3';
  label: string;
  /** CPU seconds the broker has used so far. */
  brokerCpuSeconds(): number;
  /** Events per second its drain should reach. */
  drainTarget: number;
  env: Record<string, string>;
  /** Counts what reached the broker (a queue, the stream, a subscriber). */
  held(): Promise<number>;
  close(): Promise<void>;
}

/** RabbitMQ's CPU: its Erlang VM's. */
const rabbitCpuSeconds = () => cpuSecondsOfNamed('beam.smp');

async function amqpBus(url: string): Promise<BenchBus> {
  const name = `bench-${randomBytes(4).toString('hex')}`;
  const rabbit = new Connection(url);
  rabbit.on('error', () => {});
  return {
    name: 'amqp',
    label: 'RabbitMQ',
    brokerCpuSeconds: rabbitCpuSeconds,
    drainTarget: DRAIN_TARGET,
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
    brokerCpuSeconds: () => cpuSecondsOfNamed('redis-server'),
    drainTarget: DRAIN_TARGET,
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
    brokerCpuSeconds: () => cpuSecondsOfNamed('mosquitto'),
    drainTarget: DRAIN_TARGET,
    env: { BOXRELAY_MQTT_URL: url, BOXRELAY_MQTT_TOPIC_PREFIX: prefix },
    held: async () => received,
    close: () => client.endAsync(true),
  };
}

/**
 * librdkafka's mock cluster, the tests' Kafka (test/support/kafka-mock.c, built with gcc): no Kafka
 * broker installs here. What reached it is the sum of the topic's partition offsets.
 */
async function kafkaBus(root: string): Promise<BenchBus> {
  const binary = join(mkdtempSync(join(tmpdir(), 'boxrelay-bench-kafka-')), 'kafka-mock');
  await promisify(execFile)('gcc', ['-O2', '-o', binary, join(root, 'test/support/kafka-mock.c'), '-lrdkafka']);
  const mock = spawn(binary, [], { stdio: ['pipe', 'pipe', 'inherit'] });
  const exited = new Promise((resolve) => mock.once('exit', resolve));
  const [brokers] = await createInterface({ input: mock.stdout })[Symbol.asyncIterator]().next().then(({ value }) => [value as string]);
  const topic = `bench.${randomBytes(4).toString('hex')}`;
  const admin = new Kafka({ brokers: [brokers as string], logLevel: logLevel.NOTHING }).admin();
  await admin.connect();
  return {
    name: 'kafka',
    label: 'Kafka (mock cluster)',
    brokerCpuSeconds: () => cpuSecondsOf(mock.pid as number),
    drainTarget: DRAIN_TARGET,
    env: { BOXRELAY_KAFKA_BROKERS: brokers as string, BOXRELAY_KAFKA_TOPIC: topic },
    held: async () => (await admin.fetchTopicOffsets(topic).catch(() => [])).reduce((sum, { high }) => sum + Number(high), 0),
    async close() {
      await admin.disconnect();
      mock.stdin?.end();
      await exited;
    },
  };
}

/** fauxqs, the tests' AWS (SQS, SNS and S3 on one endpoint), in a process of its own per bus, so its CPU is that bus's. */
async function fauxqs(ctx: Context) {
  const port = await freePort();
  const child = spawn(process.execPath, [join(ctx.root, 'dist/bench/targets/fauxqs.js'), String(port)], { stdio: ['ignore', 'pipe', 'inherit'] });
  const exited = new Promise((resolve) => child.once('exit', resolve));
  await new Promise((resolve, reject) => {
    child.stdout.once('data', resolve);
    child.once('exit', () => reject(new Error('bench: buses: fauxqs ended before it listened')));
  });
  const endpoint = `http://127.0.0.1:${port}`;
  const credentials = { accessKeyId: 'bench', secretAccessKey: 'bench' };
  // fauxqs takes any credentials.
  const env = { BOXRELAY_AWS_ENDPOINT: endpoint, BOXRELAY_AWS_REGION: 'us-east-1', AWS_ACCESS_KEY_ID: credentials.accessKeyId, AWS_SECRET_ACCESS_KEY: credentials.secretAccessKey };
  return {
    client: { endpoint, region: 'us-east-1', credentials },
    /** A bus on this fauxqs: the relay gets the endpoint's settings too, and `clients` are closed with it. */
    bus(bus: Omit<BenchBus, 'brokerCpuSeconds' | 'close'>, clients: { destroy(): void }[]): BenchBus {
      return {
        ...bus,
        brokerCpuSeconds: () => cpuSecondsOf(child.pid as number),
        env: { ...env, ...bus.env },
        async close() {
          for (const client of clients) client.destroy();
          child.kill('SIGTERM');
          await exited;
        },
      };
    },
  };
}

/** Messages waiting in a queue (none is received here). */
async function queueLength(sqs: SQSClient, queueUrl: string): Promise<number> {
  const { Attributes } = await sqs.send(new GetQueueAttributesCommand({ QueueUrl: queueUrl, AttributeNames: ['ApproximateNumberOfMessages'] }));
  return Number(Attributes?.ApproximateNumberOfMessages ?? 0);
}

async function sqsBus(ctx: Context): Promise<BenchBus> {
  const aws = await fauxqs(ctx);
  const sqs = new SQSClient(aws.client);
  const { QueueUrl: queue = '' } = await sqs.send(new CreateQueueCommand({ QueueName: 'bench' }));
  return aws.bus({ name: 'sqs', label: 'SQS (fauxqs)', drainTarget: 2000, env: { BOXRELAY_SQS_QUEUE_URL: queue }, held: () => queueLength(sqs, queue) }, [sqs]);
}

/** SNS, counted in a queue subscribed to the topic (raw delivery). */
async function snsBus(ctx: Context): Promise<BenchBus> {
  const aws = await fauxqs(ctx);
  const sqs = new SQSClient(aws.client);
  const sns = new SNSClient(aws.client);
  const { QueueUrl: queue = '' } = await sqs.send(new CreateQueueCommand({ QueueName: 'bench-topic' }));
  const { TopicArn: topic = '' } = await sns.send(new CreateTopicCommand({ Name: 'bench' }));
  const queueArn = `arn:aws:sqs:us-east-1:000000000000:bench-topic`;
  await sns.send(new SubscribeCommand({ TopicArn: topic, Protocol: 'sqs', Endpoint: queueArn, Attributes: { RawMessageDelivery: 'true' } }));
  return aws.bus({ name: 'sns', label: 'SNS (fauxqs)', drainTarget: 2000, env: { BOXRELAY_SNS_TOPIC_ARN: topic }, held: () => queueLength(sqs, queue) }, [sqs, sns]);
}

/** The archive, counted as the lines of its objects (each read once). A short age, so the last partial object is not waited for. */
async function s3Bus(ctx: Context): Promise<BenchBus> {
  const aws = await fauxqs(ctx);
  const s3 = new S3Client({ ...aws.client, forcePathStyle: true });
  await s3.send(new CreateBucketCommand({ Bucket: 'bench' }));
  const counted = new Map<string, number>();
  return aws.bus({
    name: 's3',
    label: 'S3 archive (fauxqs)',
    drainTarget: 10_000,
    env: { BOXRELAY_S3_ARCHIVE: 's3://bench/archive', BOXRELAY_S3_ARCHIVE_MAX_AGE: '1s' },
    async held() {
      let token: string | undefined;
      do {
        const page = await s3.send(new ListObjectsV2Command({ Bucket: 'bench', ContinuationToken: token }));
        for (const { Key } of page.Contents ?? []) {
          if (!Key || counted.has(Key)) continue;
          const object = await s3.send(new GetObjectCommand({ Bucket: 'bench', Key }));
          const lines = gunzipSync(await object.Body!.transformToByteArray()).toString('utf8').split('\n').filter(Boolean);
          counted.set(Key, lines.length);
        }
        token = page.NextContinuationToken;
      } while (token);
      return [...counted.values()].reduce((sum, n) => sum + n, 0);
    },
  }, [s3]);
}

/** `boxrelay_sink_deliveries_total{sink,outcome="delivered"}` from the relay's /metrics. */
async function delivered(internalPort: number, sink: string): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${internalPort}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`boxrelay_sink_deliveries_total{sink="${sink}",outcome="delivered"}`));
  return line ? Number(line.split(' ').at(-1)) : 0;
}

interface Drain {
  bus: string;
  /** The build that drained, when not this checkout (BENCH_COMPARE). */
  checkout: string | undefined;
  events: number;
  seconds: number | null;
  eventsPerSecond: number | null;
  /** From the first poll that found the broker holding any (every 100 ms) to the end: the drain without the relay's start-up. */
  flowingPerSecond: number | null;
  held: number;
  cpuMicrosPerEvent: number;
  brokerMicrosPerEvent: number;
  /** CPU seconds per second of the drain: the relay's process, its fan-out thread, the broker, every core of the machine. */
  cores: { relay: number; fanout: number | undefined; broker: number; machine: number };
  target: number;
}

/** The relay's fan-out worker thread (named so since the AWS drain work; a build before it has none). */
const FANOUT_THREAD = 'fanout';

/** One bus alone (no NATS, no hook) drains `events` pending rows; timed from the relay's start. `checkout`: another build's. */
async function drain(ctx: Context, bus: BenchBus, settings: BusBenchSettings, log: (line: string) => void, checkout?: string): Promise<Drain> {
  const file = join(ctx.tmp, `bus-backlog-${bus.name}-${randomBytes(3).toString('hex')}.db`);
  log(`bench: buses: storing ${settings.events} events with pending ${bus.name} rows`);
  await backlogDatabase(ctx, file, settings.events, bus.name);
  const internalPort = await freePort();
  const [brokerBefore, machineBefore] = [bus.brokerCpuSeconds(), machineBusySeconds()];
  const startedNs = process.hrtime.bigint();
  const running = await relay(`bus-drain-${bus.name}`, `${bus.label} drain`, ctx, {
    logLevel: 'info',
    database: () => file,
    fanout: false,
    env: { ...bus.env, BOXRELAY_INTERNAL_PORT: String(internalPort) },
    ...(checkout ? { checkout } : {}),
  }).start();
  try {
    const deadline = Date.now() + settings.timeoutMs;
    // The broker's count is watched first: each /metrics scrape counts the relay's backlog (CPU the
    // relay would spend on a 10 Hz poll, not on draining); the relay's own count ends the run.
    // The first count above none: the drain is flowing, the relay's start-up behind it.
    let flowing: { atNs: bigint; held: number } | undefined;
    for (let held = 0; (held = await bus.held()) < settings.events && Date.now() < deadline; ) {
      if (held > 0) flowing ??= { atNs: process.hrtime.bigint(), held };
      await new Promise((r) => setTimeout(r, 100));
    }
    let count = 0;
    while ((count = await delivered(internalPort, bus.name)) < settings.events && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    const endNs = process.hrtime.bigint();
    const wallSeconds = Number(endNs - startedNs) / 1e9;
    const seconds = count >= settings.events ? wallSeconds : null;
    const relaySeconds = running.server.cpuSeconds();
    const fanoutSeconds = running.server.threadCpuSeconds(FANOUT_THREAD);
    const brokerSeconds = bus.brokerCpuSeconds() - brokerBefore;
    const cores = {
      relay: relaySeconds / wallSeconds,
      // Its thread started with the relay: all its CPU is the drain's (and its start-up's).
      fanout: fanoutSeconds > 0 ? fanoutSeconds / wallSeconds : undefined,
      broker: brokerSeconds / wallSeconds,
      machine: (machineBusySeconds() - machineBefore) / wallSeconds,
    };
    const flowingPerSecond = seconds === null || !flowing ? null : (settings.events - flowing.held) / (Number(endNs - flowing.atNs) / 1e9);
    // What the broker holds once the relay counted them all (MQTT: what the subscriber has had so far).
    const held = await bus.held();
    log(
      `bench: buses: ${bus.label}${checkout ? ` (${checkout})` : ''} drained ${count} in ${seconds === null ? 'timed out' : `${seconds.toFixed(1)} s`} (once flowing ${int(flowingPerSecond)}/s); ` +
        `the broker holds ${held}; ` +
        `cores: relay ${cores.relay.toFixed(2)}, fan-out thread ${cores.fanout?.toFixed(2) ?? '–'}, broker ${cores.broker.toFixed(2)}, machine ${cores.machine.toFixed(2)}`,
    );
    return {
      bus: bus.label,
      checkout,
      events: settings.events,
      seconds,
      eventsPerSecond: seconds === null ? null : settings.events / seconds,
      flowingPerSecond,
      held,
      cpuMicrosPerEvent: (relaySeconds * 1e6) / Math.max(1, count),
      brokerMicrosPerEvent: (brokerSeconds * 1e6) / Math.max(1, count),
      cores,
      target: bus.drainTarget,
    };
  } finally {
    await running.stop();
  }
}

/** A relay kept running for the comparison, and how many deliveries it has accepted so far. */
interface Contender {
  key: string;
  running: Running;
  internalPort: number;
  sinks: string[];
  accepted: number;
}

/** One load slice on one relay: accepted/s, and CPU per accepted delivery until its fan-out caught up. */
interface Slice {
  perSecond: number;
  relayMicros: number;
  brokerMicros: number;
  machineMicros: number;
}

async function startContender(ctx: Context, key: string, env: Record<string, string>, sinks: string[]): Promise<Contender> {
  const internalPort = await freePort();
  const running = await relay(key, key, ctx, {
    logLevel: 'info',
    database: () => join(ctx.tmp, `${key}-${randomBytes(3).toString('hex')}.db`),
    env: { ...env, BOXRELAY_INTERNAL_PORT: String(internalPort) },
  }).start();
  return { key, running, internalPort, sinks, accepted: 0 };
}

/** Waits until every sink of the relay delivered all it accepted: a slice's fan-out must not run into the next one's. */
async function caughtUp(contender: Contender, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (const sink of contender.sinks) {
    while ((await delivered(contender.internalPort, sink)) < contender.accepted) {
      if (Date.now() > deadline) throw new Error(`bench: buses: ${contender.key}: ${sink} did not deliver its ${contender.accepted} events in time`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }
}

async function loadSlice(contender: Contender, seconds: number, settings: BusBenchSettings, brokerCpuSeconds: () => number): Promise<Slice> {
  await caughtUp(contender, settings.timeoutMs);
  const cpu = () => ({ relay: contender.running.server.cpuSeconds(), broker: brokerCpuSeconds(), machine: machineBusySeconds() });
  const before = cpu();
  const result = await runLoad(contender.running.server.port, { seconds, connections: settings.connections });
  contender.accepted += result.accepted;
  await caughtUp(contender, settings.timeoutMs);
  const after = cpu();
  const perEvent = (key: keyof typeof before) => ((after[key] - before[key]) * 1e6) / Math.max(1, result.accepted);
  return { perSecond: result.acceptedPerSecond, relayMicros: perEvent('relay'), brokerMicros: perEvent('broker'), machineMicros: perEvent('machine') };
}

/**
 * `rounds` pairs of slices, the order alternating (ABBA), each compared with its partner: this
 * machine's speed drifts by more than the 10 % target from one minute to the next; a pair of
 * neighbouring slices drifts far less.
 */
async function alternating(
  rounds: number,
  base: () => Promise<Slice>,
  other: () => Promise<Slice>,
  logPair: (pair: number, base: Slice, other: Slice) => void,
): Promise<{ base: Slice[]; other: Slice[] }> {
  const slices = { base: [] as Slice[], other: [] as Slice[] };
  for (let pair = 0; pair < rounds; pair++) {
    const order = pair % 2 === 0 ? (['base', 'other'] as const) : (['other', 'base'] as const);
    for (const which of order) slices[which].push(await (which === 'base' ? base : other)());
    logPair(pair + 1, slices.base.at(-1) as Slice, slices.other.at(-1) as Slice);
  }
  return slices;
}

/** NATS alone and NATS with the bus, both relays running, loaded in turn in alternating pairs. */
async function besideNats(ctx: Context, bus: BenchBus, settings: BusBenchSettings, log: (line: string) => void): Promise<{ alone: Slice[]; beside: Slice[] }> {
  const alone = await startContender(ctx, 'nats-alone', {}, ['nats']);
  try {
    const beside = await startContender(ctx, `nats+${bus.name}`, bus.env, ['nats', bus.name]);
    try {
      for (const contender of [alone, beside]) await loadSlice(contender, 2, settings, bus.brokerCpuSeconds);
      const slices = await alternating(
        settings.rounds,
        () => loadSlice(alone, settings.seconds, settings, bus.brokerCpuSeconds),
        () => loadSlice(beside, settings.seconds, settings, bus.brokerCpuSeconds),
        (pair, base, other) => log(`bench: buses: pair ${pair}: NATS alone ${int(base.perSecond)}/s, + ${bus.label} ${int(other.perSecond)}/s`),
      );
      return { alone: slices.base, beside: slices.other };
    } finally {
      await beside.running.stop();
    }
  } finally {
    await alone.running.stop();
  }
}

/**
 * RabbitMQ's broker without the relay's sink: NATS alone, loaded with and without a bare publisher
 * (bench/targets/amqp-publisher.ts, a process of its own) sending what the relay's sink sent, at
 * `rate`, in alternating pairs. The pairs' ratios.
 */
async function amqpPublisherBeside(ctx: Context, settings: BusBenchSettings, rate: number, log: (line: string) => void): Promise<number[]> {
  const alone = await startContender(ctx, 'nats-alone', {}, ['nats']);
  const withPublisher = async (): Promise<Slice> => {
    const publisher = spawn(process.execPath, [join(ctx.root, 'dist/bench/targets/amqp-publisher.js'), settings.amqpUrl, String(Math.round(rate))], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const exited = new Promise((resolve) => publisher.once('exit', resolve));
    try {
      await new Promise((resolve, reject) => {
        publisher.stdout.once('data', resolve);
        publisher.once('exit', () => reject(new Error('bench: buses: the RabbitMQ publisher ended before it published')));
      });
      return await loadSlice(alone, settings.seconds, settings, rabbitCpuSeconds);
    } finally {
      publisher.kill('SIGTERM');
      await exited;
    }
  };
  try {
    await loadSlice(alone, 2, settings, rabbitCpuSeconds);
    const slices = await alternating(
      settings.rounds,
      () => loadSlice(alone, settings.seconds, settings, rabbitCpuSeconds),
      withPublisher,
      (pair, base, other) => log(`bench: buses: pair ${pair}: NATS alone ${int(base.perSecond)}/s, with a bare RabbitMQ publisher beside it ${int(other.perSecond)}/s`),
    );
    return slices.other.map((slice, pair) => slice.perSecond / (slices.base[pair] as Slice).perSecond);
  } finally {
    await alone.running.stop();
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
  const drainers: Record<BenchBus['name'], () => Promise<BenchBus>> = {
    amqp: () => amqpBus(settings.amqpUrl),
    redis: () => redisBus(settings.redisUrl),
    mqtt: () => mqttBus(settings.mqttUrl),
    kafka: () => kafkaBus(ctx.root),
    sqs: () => sqsBus(ctx),
    sns: () => snsBus(ctx),
    s3: () => s3Bus(ctx),
  };
  const lines = ['## Buses: RabbitMQ, Redis Streams, MQTT, Kafka, SQS, SNS, the S3 archive', ''];
  if (parts.drain) {
    const drains: Drain[] = [];
    for (const [name, make] of Object.entries(drainers)) {
      if (!settings.drains.includes(name)) continue;
      // This build, then each BENCH_COMPARE build, each against a broker of its own (fauxqs and the
      // Kafka mock: a fresh process, so its CPU is that drain's).
      for (const checkout of [undefined, ...settings.compare]) {
        const bus = await make();
        try {
          drains.push(await drain(ctx, bus, settings, log, checkout));
        } finally {
          await bus.close();
        }
      }
    }
    const cores = (n: number | undefined) => (n === undefined ? '–' : n.toFixed(2));
    lines.push(
      `Each bus alone (no NATS, no hook) drains ${int(settings.events)} pending rows (what an outage leaves), timed from the relay's start ` +
        'until its `sink_deliveries_total{outcome="delivered"}` reaches the backlog (the broker confirmed, answered or PUBACKed each; ' +
        "S3 stored the object holding it). CPU per event: the relay's process, and the broker's (fauxqs and the Kafka mock: their own " +
        'process; RabbitMQ, Redis and Mosquitto: every process of that name). Cores: CPU seconds per second of the drain, of the ' +
        "relay's process, of its fan-out worker thread (the one thread that runs every sink: near 1.00 it is the bound), of the " +
        `broker (near 1.00: the broker is the bound) and of the whole machine (${availableParallelism()} cores; near all of them: ` +
        'the drain shares them with other work). Once flowing: events/s from the first poll (every 100 ms) that found the broker ' +
        "holding any to the end, without the relay's start-up.",
      '',
      '| bus | build | events/s | once flowing | seconds | held by the broker | relay CPU µs/event | broker CPU µs/event | cores: relay / fan-out thread / broker / machine | target |',
      '|---|---|---:|---:|---:|---:|---:|---:|---|---|',
      ...drains.map(
        (d) =>
          `| ${d.bus} | ${d.checkout ?? 'this'} | ${int(d.eventsPerSecond)} | ${int(d.flowingPerSecond)} | ${d.seconds === null ? 'timed out' : d.seconds.toFixed(1)} | ${int(d.held)} | ` +
          `${int(d.cpuMicrosPerEvent)} | ${int(d.brokerMicrosPerEvent)} | ${cores(d.cores.relay)} / ${cores(d.cores.fanout)} / ${cores(d.cores.broker)} / ` +
          `${cores(d.cores.machine)} | >= ${int(d.target)}/s: ${d.eventsPerSecond !== null && d.eventsPerSecond >= d.target ? 'met' : 'not met'} |`,
      ),
      '',
    );
  }
  if (parts.besideNats && ctx.natsUrl) {
    const rows: string[] = [];
    let publisherRatios: number[] = [];
    for (const make of makers) {
      const bus = await make();
      try {
        const { alone, beside } = await besideNats(ctx, bus, settings, log);
        const ratios = beside.map((slice, pair) => slice.perSecond / (alone[pair] as Slice).perSecond);
        const cost = 1 - median(ratios);
        if (bus.name === 'amqp') publisherRatios = await amqpPublisherBeside(ctx, settings, median(beside.map((slice) => slice.perSecond)), log);
        const mid = (slices: Slice[], key: keyof Slice) => median(slices.map((slice) => slice[key]));
        rows.push(
          `| ${bus.label} | ${int(mid(alone, 'perSecond'))} | ${int(mid(beside, 'perSecond'))} | ${ratios.map((r) => r.toFixed(2)).join(', ')} | ` +
            `${(cost * 100).toFixed(1)} % | ${int(mid(alone, 'relayMicros'))} -> ${int(mid(beside, 'relayMicros'))} | ${int(mid(beside, 'brokerMicros'))} | ` +
            `${int(mid(alone, 'machineMicros'))} -> ${int(mid(beside, 'machineMicros'))} | <= ${COST_TARGET * 100} %: ${cost <= COST_TARGET ? 'met' : 'not met'} |`,
        );
      } finally {
        await bus.close();
      }
    }
    lines.push(
      `Accepted/s of the relay (worker fan-out, SQLite) with NATS alone and with one bus beside it. Both relays run; they are ` +
        `loaded in turn, ${settings.seconds} s at ${settings.connections} connections per slice, ${settings.rounds} pairs of slices in ` +
        'alternating order, each slice starting once the other relay delivered everything. The cost is one minus the median of the ' +
        "pairs' ratios. CPU is per accepted delivery, medians, counted until the fan-out caught up: the relay's process, the bus's " +
        'broker, and the whole machine (load generator and NATS included).',
      '',
      '| bus | NATS alone, accepted/s | NATS + bus, accepted/s | ratio of each pair | cost | relay CPU µs | broker CPU µs | machine CPU µs | target |',
      '|---|---:|---:|---:|---:|---:|---:|---:|---|',
      ...rows,
      '',
    );
    if (publisherRatios.length > 0) {
      lines.push(
        "RabbitMQ's broker alone, without the relay's sink: NATS alone, loaded in the same way with and without a bare publisher " +
          "in a process of its own (persistent messages of the same size, confirmed, to a durable queue) at the rate the relay's " +
          `sink published: ratio of each pair ${publisherRatios.map((r) => r.toFixed(2)).join(', ')}, cost ${((1 - median(publisherRatios)) * 100).toFixed(1)} %.`,
        '',
      );
    }
  } else if (parts.besideNats) lines.push('No NATS server: the comparison beside NATS is skipped.', '');
  return { lines };
}
