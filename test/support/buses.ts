import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { connect as connectTcp } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Redis } from 'ioredis';
import { connectAsync, type IClientOptions, type IPublishPacket } from 'mqtt';
import { Connection, type AsyncMessage } from 'rabbitmq-client';
import request from 'supertest';
import { expect } from 'vitest';
import { adminAuth, metricValue, outboxRows, pendingCount } from './fanout-relay.js';
import type { TestRelay } from './relay.js';
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

/**
 * A queue of its own bound with `#` to a durable topic exchange (declared here too), keeping every
 * message; not exclusive, so it keeps what arrives while its connection is closed.
 */
export async function amqpCollector(exchange: string, url = SHARED_AMQP): Promise<Collected<AsyncMessage> & { close(): Promise<void> }> {
  const rabbit = new Connection(url);
  rabbit.on('error', () => {});
  const collected = collector<AsyncMessage>();
  const queue = `${exchange}-test-${randomBytes(3).toString('hex')}`;
  const consumer = rabbit.createConsumer(
    { queue, queueOptions: { durable: false }, exchanges: [{ exchange, type: 'topic', durable: true }], queueBindings: [{ queue, exchange, routingKey: '#' }] },
    (message) => collected.push(message),
  );
  await new Promise((resolve) => consumer.once('ready', resolve));
  return {
    ...collected,
    async close() {
      await consumer.close();
      await rabbit.queueDelete({ queue }).catch(() => {});
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
  // The tests' consumers connect as guest.
  await rabbitmqctl('set_permissions', '-p', vhost, 'guest', '.*', '.*', '.*');
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
  /** SIGSTOP: the broker keeps its connections open and answers nothing, until `resume` (SIGCONT). */
  hang(): void;
  resume(): void;
}

export async function ownBroker(scheme: string, command: (port: number, dir: string) => [string, string[]]): Promise<OwnBroker> {
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
    hang: () => void child?.kill('SIGSTOP'),
    resume: () => void child?.kill('SIGCONT'),
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

/** mosquitto with persistence (as root: its own user could not write the temporary directory), so a persistent subscriber's session and queued messages survive a clean restart. */
export function ownMosquitto(): Promise<OwnBroker> {
  return ownBroker('mqtt', (port, dir) => {
    const config = join(dir, 'mosquitto.conf');
    writeFileSync(config, `listener ${port} 127.0.0.1\nallow_anonymous true\npersistence true\npersistence_location ${dir}/\nuser root\n`);
    return ['mosquitto', ['-c', config]];
  });
}

/** The internal `/readyz` body. */
export async function readyz(t: TestRelay): Promise<{ ok: boolean; checks: Record<string, string>; errors?: Record<string, string> }> {
  return (await request(t.relay.internalApp).get('/readyz')).body;
}

/** Resolves once the bus's `/readyz` check is ok. */
export const busUp = (t: TestRelay, bus: string) => waitFor(async () => (await readyz(t)).checks[bus] === 'ok', `${bus} to be up`);

/** The bus alone, up and idle, on `/readyz`, `/admin/sinks` and the metrics, after `delivered` deliveries. */
export async function expectListed(t: TestRelay, bus: string, delivered: number): Promise<void> {
  expect((await readyz(t)).checks).toEqual({ storage: 'ok', [bus]: 'ok' });
  const sinks = await request(t.relay.internalApp).get('/admin/sinks').set(adminAuth);
  expect(sinks.body.sinks).toEqual([{ name: bus, kind: bus, up: true, paused: false, pending: 0, deadLetters: 0, throttled: false }]);
  expect(await metricValue(t.registry, 'boxrelay_sink_deliveries_total', { sink: bus, outcome: 'delivered' })).toBe(delivered);
  expect(await metricValue(t.registry, 'boxrelay_sink_up', { sink: bus })).toBe(1);
}

/** Posts box.ready deliveries (box `bx_<i mod 5>`), each answered 200, keeping their event ids. */
export function poster(t: TestRelay) {
  const posted = new Set<string>();
  return {
    posted,
    async post(from: number, to: number) {
      for (let i = from; i < to; i++) {
        const answer = await t.post({ boxId: `bx_${i % 5}` });
        expect(answer.status).toBe(200);
        posted.add(answer.deliveryId);
      }
    },
  };
}

/** While the bus is down: `/readyz` still 200 naming it down, the gauge at 0, and at least `pending` events pending (none a dead letter). */
export async function expectHeld(t: TestRelay, bus: string, pending: number): Promise<void> {
  const ready = await request(t.relay.internalApp).get('/readyz');
  expect([ready.status, ready.body.checks]).toEqual([200, { storage: 'ok', [bus]: 'down' }]);
  expect(await metricValue(t.registry, 'boxrelay_sink_up', { sink: bus })).toBe(0);
  expect(await pendingCount(t, bus)).toBeGreaterThanOrEqual(pending);
  expect((await outboxRows(t, bus)).every((row) => row.status === 'pending')).toBe(true);
}

/** An OTLP endpoint that takes every export (closed through `defer`): tracing on, so attempts carry a traceparent. */
export async function otlpEndpoint(defer: (cleanup: () => Promise<unknown>) => void): Promise<string> {
  const server = createServer((req, res) => req.resume().on('end', () => res.writeHead(200, { 'content-type': 'application/json' }).end('{}')));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  defer(() => new Promise((resolve) => server.close(resolve)));
  return `http://127.0.0.1:${(server.address() as { port: number }).port}`;
}
