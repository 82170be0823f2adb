import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { connect as connectTcp } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Redis } from 'ioredis';
import { connectAsync, type IClientOptions, type IPublishPacket } from 'mqtt';
import { Connection, type AsyncMessage } from 'rabbitmq-client';
import { freePort } from './nats.js';
import { waitFor } from './fanout.js';

/** The shared brokers of the machine (.ci/run starts them). A missing broker fails the tests that need it. */
export const SHARED_AMQP = process.env.BOXRELAY_TEST_AMQP_URL ?? 'amqp://guest:guest@127.0.0.1:5672';
export const SHARED_REDIS = process.env.BOXRELAY_TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';
export const SHARED_MQTT = process.env.BOXRELAY_TEST_MQTT_URL ?? 'mqtt://127.0.0.1:1883';

/** A name (exchange, stream, topic prefix, vhost) no other test or agent uses. */
export const uniqueName = (): string => `t${randomBytes(5).toString('hex')}`;

/** Box ids and types a routing key or topic must not be steered by (contract section 12 and 4). */
export const HOSTILE_BOX_IDS = ['bx.a', 'bx*', 'bx>', 'bx#', 'bx+', 'bx/a', 'bx a', 'bx_é😀', 'a.b.c', '#', '+', '/'];

export interface Collected<T> {
  messages: T[];
  received(count: number, timeoutMs?: number): Promise<T[]>;
}

function collector<T>(): Collected<T> & { push(message: T): void } {
  const messages: T[] = [];
  return {
    messages,
    push: (message) => void messages.push(message),
    received: (count, timeoutMs = 20_000) => waitFor(() => (messages.length >= count ? messages : undefined), `${count} messages (have ${messages.length})`, timeoutMs),
  };
}

/** A queue of its own bound with `#` to a durable topic exchange (declared here too), keeping every message. */
export async function amqpCollector(exchange: string, url = SHARED_AMQP): Promise<Collected<AsyncMessage> & { close(): Promise<void> }> {
  const rabbit = new Connection(url);
  rabbit.on('error', () => {});
  const collected = collector<AsyncMessage>();
  const queue = `${exchange}-test-${randomBytes(3).toString('hex')}`;
  const consumer = rabbit.createConsumer(
    { queue, queueOptions: { exclusive: true, autoDelete: true }, exchanges: [{ exchange, type: 'topic', durable: true }], queueBindings: [{ queue, exchange, routingKey: '#' }] },
    (message) => collected.push(message),
  );
  await new Promise((resolve) => consumer.once('ready', resolve));
  return {
    ...collected,
    async close() {
      await consumer.close();
      await rabbit.exchangeDelete({ exchange }).catch(() => {});
      await rabbit.close();
    },
  };
}

const run = promisify(execFile);

/** `rabbitmqctl` on the machine's broker. */
export async function rabbitmqctl(...args: string[]): Promise<string> {
  return (await run('rabbitmqctl', args, { timeout: 60_000 })).stdout;
}

/** A vhost and a user with every right on it; removed by `close()`. */
export async function amqpVhost(): Promise<{ vhost: string; user: string; password: string; url: string; close(): Promise<void> }> {
  const vhost = uniqueName();
  const user = `${vhost}-user`;
  const password = randomBytes(8).toString('hex');
  await rabbitmqctl('add_vhost', vhost);
  await rabbitmqctl('add_user', user, password);
  await rabbitmqctl('set_permissions', '-p', vhost, user, '.*', '.*', '.*');
  return {
    vhost,
    user,
    password,
    url: `amqp://${user}:${password}@127.0.0.1:5672/${vhost}`,
    async close() {
      await rabbitmqctl('delete_vhost', vhost).catch(() => {});
      await rabbitmqctl('delete_user', user).catch(() => {});
    },
  };
}

/** A Redis client for assertions. */
export function redisClient(url = SHARED_REDIS): Redis {
  return new Redis(url, { lazyConnect: false, maxRetriesPerRequest: 3 });
}

/** A stream's entries, each as its field map. */
export async function streamEntries(redis: Redis, stream: string): Promise<Record<string, string>[]> {
  const entries = await redis.xrange(stream, '-', '+');
  return entries.map(([, fields]) => Object.fromEntries(Array.from({ length: fields.length / 2 }, (_, i) => [fields[2 * i], fields[2 * i + 1]])));
}

/** An MQTT subscriber to `topic` keeping every message (MQTT 5 unless `options` say otherwise). */
export async function mqttCollector(topic: string, url = SHARED_MQTT, options: IClientOptions = {}): Promise<Collected<IPublishPacket> & { close(): Promise<void> }> {
  const client = await connectAsync(url, { protocolVersion: 5, reconnectPeriod: 100, ...options });
  const collected = collector<IPublishPacket>();
  client.on('message', (_topic, _payload, packet) => collected.push(packet));
  await client.subscribeAsync(topic, { qos: 1 });
  return { ...collected, close: () => client.endAsync(true) };
}

/** A broker process of the test's own on a free port, stopped and started again by the test. */
export interface OwnBroker {
  url: string;
  port: number;
  /** SIGTERM (a clean stop, so what it persists is saved), or SIGKILL with `kill: true`. */
  stop(options?: { kill?: boolean }): Promise<void>;
  start(): Promise<void>;
}

async function ownBroker(scheme: string, command: (port: number, dir: string) => [string, string[]]): Promise<OwnBroker> {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), `boxrelay-${scheme}-`));
  let child: ChildProcess | undefined;
  const accepting = () =>
    new Promise<boolean>((resolve) => {
      const socket = connectTcp(port, '127.0.0.1');
      socket.once('connect', () => (socket.destroy(), resolve(true)));
      socket.once('error', () => resolve(false));
    });
  const own: OwnBroker = {
    url: `${scheme}://127.0.0.1:${port}`,
    port,
    async start() {
      const [file, args] = command(port, dir);
      child = spawn(file, args, { stdio: 'ignore' });
      await waitFor(accepting, `${file} to listen on ${port}`, 10_000);
    },
    async stop({ kill = false } = {}) {
      const exiting = child && child.exitCode === null ? new Promise((resolve) => child!.once('exit', resolve)) : undefined;
      child?.kill(kill ? 'SIGKILL' : 'SIGTERM');
      await exiting;
      child = undefined;
    },
  };
  await own.start();
  return own;
}

/** redis-server with an append-only file fsynced at every write, so a restart keeps the stream. */
export function ownRedis(): Promise<OwnBroker> {
  return ownBroker('redis', (port, dir) => [
    'redis-server',
    ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'yes', '--appendfsync', 'always', '--dir', dir],
  ]);
}

/** mosquitto with persistence, so a persistent subscriber's session and queued messages survive a clean restart. */
export function ownMosquitto(): Promise<OwnBroker> {
  return ownBroker('mqtt', (port, dir) => {
    const config = join(dir, 'mosquitto.conf');
    writeFileSync(config, `listener ${port} 127.0.0.1\nallow_anonymous true\npersistence true\npersistence_location ${dir}/\n`);
    return ['mosquitto', ['-c', config]];
  });
}
