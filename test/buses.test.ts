import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import request from 'supertest';
import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../src/config/load.js';
import { configSchema } from '../src/config/schema.js';
import { createSinks } from '../src/dispatch/fanout.js';
import { createLogger } from '../src/log.js';
import { systemClock } from '../src/clock.js';
import { BUSES } from '../src/sinks/buses.js';
import type { ArchiveLedger } from '../src/store/archive/ledger.js';
import { SHARED_AMQP, SHARED_MQTT, SHARED_REDIS, amqpCollector, busUp, mqttCollector, redisClient, streamEntries, uniqueName } from './support/buses.js';
import { adminAuth, fanoutFixture } from './support/fanout-relay.js';
import { waitFor } from './support/fanout.js';
import { SHARED_NATS, collect, natsClient, uniqueNames } from './support/nats.js';
import { SECRET, delivery } from './support/sign.js';

const { defer, relay, serve } = fanoutFixture();
/** The sinks are built here, never sent to: the archive's ledger is not asked. */
const unusedLedger: ArchiveLedger = { record: () => Promise.reject(new Error('not asked')), written: () => Promise.reject(new Error('not asked')) };

/** A consumer on each bus for names of the test's own (exchange, stream, topic prefix), removed at the end. */
async function consumers(name: string) {
  const redis = redisClient();
  defer(async () => {
    await redis.del(name, ...(await redis.keys(`${name}:seen:*`)));
    redis.disconnect();
  });
  const amqp = await amqpCollector(name);
  defer(() => amqp.close());
  const mqtt = await mqttCollector(`${name}/#`);
  defer(() => mqtt.close());
  return { redis, amqp, mqtt };
}

describe('the bus seam', () => {
  it('builds one sink per configured bus, in BUSES order before the hooks, each with its ordering', () => {
    const config = configSchema.parse({
      natsUrl: SHARED_NATS,
      amqpUrl: SHARED_AMQP,
      amqpOrdering: 'per-box',
      redisUrl: SHARED_REDIS,
      mqttUrl: SHARED_MQTT,
      mqttOrdering: 'per-box',
      kafkaBrokers: '127.0.0.1:9',
      kafkaOrdering: 'per-box',
      awsEndpoint: 'http://127.0.0.1:9',
      sqsQueueUrl: 'http://127.0.0.1:9/000000000000/events',
      sqsOrdering: 'per-box',
      snsTopicArn: 'arn:aws:sns:us-east-1:000000000000:events',
      s3Archive: 's3://archive-bucket/relay',
      hooks: [{ name: 'alerts', url: 'http://127.0.0.1:9/h' }],
    });
    const { sinks, buses } = createSinks({ config, clock: systemClock, logger: createLogger('silent'), archive: unusedLedger });
    expect(sinks.map((s) => s.name)).toEqual(['nats', 'amqp', 'redis', 'mqtt', 'kafka', 'sqs', 'sns', 's3', 'alerts']);
    expect(buses.map((b) => b.name)).toEqual(BUSES.map((b) => b.name));
    expect(sinks.map((s) => s.ordering)).toEqual(['none', 'per-box', 'none', 'per-box', 'per-box', 'per-box', 'none', 'none', 'none']);
    // Buses retry on the hooks' schedule and pause after 10 minutes (contract sections 12, 18 and 20); NATS keeps its own rule.
    expect(buses.map((b) => [b.maxAttempts, b.pauseAfterMs])).toEqual([[Infinity, undefined], ...buses.slice(1).map(() => [8, 600_000])]);
    expect(buses.every((b) => b.check().state === 'down' && !b.up())).toBe(true);
  });

  it('hands a FIFO queue and a FIFO topic a box\'s events one at a time, whatever *_ORDERING says (contract section 20)', () => {
    const config = configSchema.parse({
      secrets: ['whsec_dGVzdA=='],
      awsEndpoint: 'http://127.0.0.1:9',
      sqsQueueUrl: 'http://127.0.0.1:9/000000000000/events.fifo',
      snsTopicArn: 'arn:aws:sns:us-east-1:000000000000:events.fifo',
    });
    const { sinks } = createSinks({ config, clock: systemClock, logger: createLogger('silent'), archive: unusedLedger });
    expect([config.sqsOrdering, config.snsOrdering]).toEqual(['none', 'none']);
    expect(sinks.map((s) => [s.name, s.ordering])).toEqual([
      ['sqs', 'per-box'],
      ['sns', 'per-box'],
    ]);
  });

  it('reads every section 12 variable from the env and the config file (env winning), with the contract defaults', () => {
    const defaults = loadConfig({ env: {} });
    expect([defaults.amqpUrl, defaults.amqpExchange, defaults.amqpQueue, defaults.redisUrl, defaults.redisStream, defaults.redisMaxlen]).toEqual([
      undefined, 'sandbox', undefined, undefined, 'sandbox:events', 1_000_000,
    ]);
    expect([defaults.redisDuplicateWindow, defaults.mqttUrl, defaults.mqttTopicPrefix, defaults.amqpOrdering, defaults.redisOrdering, defaults.mqttOrdering]).toEqual([
      3_600_000, undefined, 'sandbox', 'none', 'none', 'none',
    ]);
    const file = JSON.stringify({ amqpUrl: 'amqp://file:5672', amqpExchange: 'from-file', redisMaxlen: 5, mqttTopicPrefix: 'file/level' });
    const config = loadConfig({
      env: {
        BOXRELAY_CONFIG: '/config.json',
        BOXRELAY_AMQP_URL: 'amqps://relay:pw@rabbit:5671/vhost',
        BOXRELAY_AMQP_QUEUE: 'all-events',
        BOXRELAY_AMQP_ORDERING: 'per-box',
        BOXRELAY_REDIS_URL: 'rediss://redis:6380',
        BOXRELAY_REDIS_STREAM: 'box:events',
        BOXRELAY_REDIS_DUPLICATE_WINDOW: '10m',
        BOXRELAY_REDIS_ORDERING: 'per-box',
        BOXRELAY_MQTT_URL: 'mqtts://mqtt:8883',
        BOXRELAY_MQTT_ORDERING: 'per-box',
      },
      readFile: () => file,
    });
    expect(config).toMatchObject({
      amqpUrl: 'amqps://relay:pw@rabbit:5671/vhost', amqpExchange: 'from-file', amqpQueue: 'all-events', amqpOrdering: 'per-box',
      redisUrl: 'rediss://redis:6380', redisStream: 'box:events', redisMaxlen: 5, redisDuplicateWindow: 600_000, redisOrdering: 'per-box',
      mqttUrl: 'mqtts://mqtt:8883', mqttTopicPrefix: 'file/level', mqttOrdering: 'per-box',
    });
  });

  it('refuses bad bus settings with one line each, naming the variable', () => {
    let problems: string[] = [];
    try {
      loadConfig({ env: { BOXRELAY_AMQP_URL: 'http://rabbit', BOXRELAY_REDIS_MAXLEN: '-1', BOXRELAY_REDIS_DUPLICATE_WINDOW: '0s', BOXRELAY_MQTT_TOPIC_PREFIX: 'a/+', BOXRELAY_MQTT_ORDERING: 'fifo' } });
    } catch (error) {
      problems = (error as ConfigError).problems;
    }
    expect(problems.map((line) => line.split(':')[0])).toEqual([
      'BOXRELAY_AMQP_URL', 'BOXRELAY_REDIS_MAXLEN', 'BOXRELAY_REDIS_DUPLICATE_WINDOW', 'BOXRELAY_MQTT_TOPIC_PREFIX', 'BOXRELAY_MQTT_ORDERING',
    ]);
  });

  it('refuses a hook named like a bus', () => {
    for (const name of ['nats', 'amqp', 'redis', 'mqtt', 'kafka']) {
      expect(configSchema.safeParse({ hooks: [{ name, url: 'http://127.0.0.1:9/h' }] }).success, name).toBe(false);
    }
  });
});

describe('operator events, pause and resume on the buses', () => {
  it('announces a paused and resumed bus to every other bus under the section 4 rule, never to itself', async () => {
    const name = uniqueName();
    const { prefix, stream } = uniqueNames();
    const nats = await natsClient();
    defer(() => nats.close());
    nats.streams.push(stream);
    const { redis, amqp, mqtt } = await consumers(name);
    const natsMessages = collect(nats.nc, `${prefix}.boxrelay.>`);
    const t = await relay({
      natsUrl: SHARED_NATS, natsSubjectPrefix: prefix, natsStream: stream,
      amqpUrl: SHARED_AMQP, amqpExchange: name,
      redisUrl: SHARED_REDIS, redisStream: name,
      mqttUrl: SHARED_MQTT, mqttTopicPrefix: name,
    });
    for (const bus of ['nats', 'amqp', 'redis', 'mqtt']) await busUp(t, bus);

    const paused = await request(t.relay.internalApp).post('/admin/sinks/redis/pause').set(adminAuth);
    expect(paused.body).toEqual({ ok: true, sink: { name: 'redis', kind: 'redis', up: true, paused: true, pending: 0, deadLetters: 0, throttled: false } });
    // Paused: accepted events wait for it, and flow to the others.
    const held = await t.post({ boxId: 'bx_held' });
    await request(t.relay.internalApp).post('/admin/sinks/redis/resume').set(adminAuth).expect(200);

    const amqpKeys = (await amqp.received(3)).map((m) => m.routingKey);
    expect(amqpKeys).toEqual(['boxrelay.sink.paused.redis', 'box.ready.bx_held', 'boxrelay.sink.resumed.redis']);
    const topics = (await mqtt.received(3)).map((m) => m.topic);
    expect(topics).toEqual([`${name}/boxrelay/sink/paused/redis`, `${name}/box/ready/bx_held`, `${name}/boxrelay/sink/resumed/redis`]);
    const subjects = (await natsMessages.received(2)).map((m) => m.subject);
    expect(subjects).toEqual([`${prefix}.boxrelay.sink.paused.redis`, `${prefix}.boxrelay.sink.resumed.redis`]);
    // Redis gets the held event once resumed, and no announcement about itself.
    await waitFor(async () => (await redis.xlen(name)) === 1, 'the held event on Redis');
    const entries = await streamEntries(redis, name);
    expect(entries.map((e) => [e.id, e.type])).toEqual([[held.deliveryId, 'box.ready']]);
    const event = JSON.parse((await amqp.received(1))[0]!.body.toString());
    expect(event).toMatchObject({ type: 'boxrelay.sink.paused', subject: 'redis', source: 'sandbox/boxrelay' });
  });
});

describe('`boxrelay serve` (fan-out in its worker thread)', () => {
  it('names each bus on /readyz from the worker and publishes to each', async () => {
    const name = uniqueName();
    const { redis, amqp, mqtt } = await consumers(name);
    const dir = mkdtempSync(join(tmpdir(), 'boxrelay-buses-'));
    const relayProcess = await serve({
      BOXRELAY_SECRETS: SECRET,
      BOXRELAY_DATABASE: join(dir, 'relay.db'),
      BOXRELAY_AMQP_URL: SHARED_AMQP,
      BOXRELAY_AMQP_EXCHANGE: name,
      BOXRELAY_REDIS_URL: SHARED_REDIS,
      BOXRELAY_REDIS_STREAM: name,
      BOXRELAY_MQTT_URL: SHARED_MQTT,
      BOXRELAY_MQTT_TOPIC_PREFIX: name,
    });
    const readyz = async () => (await (await fetch(`http://127.0.0.1:${relayProcess.internalPort}/readyz`)).json()) as { checks: Record<string, string> };
    await waitFor(async () => Object.values((await readyz()).checks).every((state) => state === 'ok') && (await readyz()), 'every bus to be up');
    expect((await readyz()).checks).toEqual({ storage: 'ok', amqp: 'ok', redis: 'ok', mqtt: 'ok' });

    const d = delivery({ timestamp: Math.floor(Date.now() / 1000), type: 'box.error', boxId: 'bx_w' });
    expect((await fetch(`http://127.0.0.1:${relayProcess.port}/webhooks`, { method: 'POST', headers: d.headers, body: d.body })).status).toBe(200);
    expect((await amqp.received(1))[0]!.messageId).toBe(d.id);
    expect((await mqtt.received(1))[0]!.topic).toBe(`${name}/box/error/bx_w`);
    await waitFor(async () => (await streamEntries(redis, name))[0]?.id === d.id, 'the entry on Redis');
  });
});
