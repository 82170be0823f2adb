import request from 'supertest';
import { expect, it } from 'vitest';
import { createTracing } from '../src/tracing/tracing.js';
import { HOSTILE_BOX_IDS, busUp, otlpEndpoint, expectHeld, expectListed, poster, readyz, SHARED_REDIS, ownRedis, redisClient, streamEntries, uniqueName } from './support/buses.js';
import { adminAuth, allDelivered, fanoutFixture, metricValue } from './support/fanout-relay.js';
import { waitFor } from './support/fanout.js';

const { defer, relay } = fanoutFixture();


/** A stream key of the test's own on the shared server, deleted (with its seen-keys) at the end. */
function uniqueStream(redis: ReturnType<typeof redisClient>): string {
  const stream = `${uniqueName()}:events`;
  defer(async () => {
    const seen = await redis.keys(`${stream}:seen:*`);
    await redis.del(stream, ...seen);
    redis.disconnect();
  });
  return stream;
}

it('adds one entry per event with the fields id, type, subject, event and traceparent, and lists the sink everywhere', async () => {
  const redis = redisClient();
  const stream = uniqueStream(redis);
  const tracing = createTracing({ OTEL_EXPORTER_OTLP_ENDPOINT: await otlpEndpoint(defer), OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json', OTEL_BSP_SCHEDULE_DELAY: '50' });
  const t = await relay({ redisUrl: SHARED_REDIS, redisStream: stream }, { tracing });
  await busUp(t, 'redis');

  const posted = [];
  for (const [type, boxId] of [['box.ready', 'bx_1'], ['box.error', 'bx.a*b> c'], ['box.archived', 'bx_é']] as const) {
    const answer = await t.post({ type, boxId });
    expect(answer.status).toBe(200);
    posted.push({ id: answer.deliveryId, type, boxId });
  }
  await allDelivered(t, 'redis');
  const entries = await streamEntries(redis, stream);
  expect(entries.map((e) => Object.keys(e))).toEqual(posted.map(() => ['id', 'type', 'subject', 'event', 'traceparent']));
  for (const [i, { id, type, boxId }] of posted.entries()) {
    const entry = entries[i]!;
    expect([entry.id, entry.type, entry.subject]).toEqual([id, type, boxId]);
    const event = JSON.parse(entry.event!);
    expect(event).toMatchObject({ specversion: '1.0', id, type, subject: boxId, source: 'sandbox', datacontenttype: 'application/json' });
    expect(entry.traceparent).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
  }

  await expectListed(t, 'redis', 3);
});

it('adds nothing for a re-send within the duplicate window (a replay), and again after the window', async () => {
  const redis = redisClient();
  const stream = uniqueStream(redis);
  const t = await relay({ redisUrl: SHARED_REDIS, redisStream: stream, redisDuplicateWindow: '1s' });
  await busUp(t, 'redis');
  const since = new Date(t.clock.now() - 1000).toISOString();
  for (let i = 0; i < 5; i++) expect((await t.post({ boxId: `bx_${i}` })).status).toBe(200);
  await allDelivered(t, 'redis');
  expect(await redis.xlen(stream)).toBe(5);

  const replay = await request(t.relay.internalApp).post('/admin/replay').set(adminAuth).send({ since, sink: 'redis' });
  expect(replay.body).toEqual({ ok: true, queued: 5 });
  await allDelivered(t, 'redis');
  expect(await redis.xlen(stream)).toBe(5);
  expect(await metricValue(t.registry, 'boxrelay_sink_deliveries_total', { sink: 'redis', outcome: 'delivered' })).toBe(10);

  // Past the window (the keys' TTL, on Redis's own clock) a replay adds the events again.
  await waitFor(async () => (await redis.keys(`${stream}:seen:*`)).length === 0, 'the seen-keys to expire');
  await request(t.relay.internalApp).post('/admin/replay').set(adminAuth).send({ since, sink: 'redis' });
  await allDelivered(t, 'redis');
  expect(await redis.xlen(stream)).toBe(10);
});

it('trims the stream to about BOXRELAY_REDIS_MAXLEN entries', async () => {
  const redis = redisClient();
  const stream = uniqueStream(redis);
  const t = await relay({ redisUrl: SHARED_REDIS, redisStream: stream, redisMaxlen: 10 });
  await busUp(t, 'redis');
  for (let i = 0; i < 250; i++) expect((await t.post({ boxId: `bx_${i}` })).status).toBe(200);
  await allDelivered(t, 'redis');
  const length = await redis.xlen(stream);
  // `~` trims whole radix-tree nodes (100 entries by default): at least the limit, well under the 250 added.
  expect(length).toBeGreaterThanOrEqual(10);
  expect(length).toBeLessThanOrEqual(110);
});

it('keeps the raw box id of hostile ids in `subject`, each event its own entry', async () => {
  const redis = redisClient();
  const stream = uniqueStream(redis);
  const t = await relay({ redisUrl: SHARED_REDIS, redisStream: stream });
  await busUp(t, 'redis');
  for (const boxId of HOSTILE_BOX_IDS) expect((await t.post({ type: 'box.error', boxId })).status).toBe(200);
  await allDelivered(t, 'redis');
  const entries = await streamEntries(redis, stream);
  expect(entries.map((e) => e.subject)).toEqual(HOSTILE_BOX_IDS);
  expect(entries.map((e) => JSON.parse(e.event!).data.box.id)).toEqual(HOSTILE_BOX_IDS);
});

it('keeps answering 200 while Redis is down, shows it on /readyz, and adds every event exactly once when it is back', async () => {
  const server = await ownRedis();
  defer(() => server.stop({ kill: true }));
  const t = await relay({ redisUrl: server.url }, { buses: { ackTimeoutMs: 1000, backoff: { minMs: 50, maxMs: 300 } } });
  await busUp(t, 'redis');

  const { posted, post } = poster(t);
  // Killed right after a burst: adds still in flight may be made without their answer coming back.
  await post(0, 100);
  await server.stop({ kill: true });
  await waitFor(async () => (await readyz(t)).checks.redis === 'down', 'Redis to be seen down');
  await post(100, 150);
  await expectHeld(t, 'redis', 50);

  await server.start();
  await allDelivered(t, 'redis', 30_000);
  const redis = redisClient(server.url);
  defer(async () => redis.disconnect());
  const ids = (await streamEntries(redis, 'sandbox:events')).map((e) => e.id);
  expect(ids.length).toBe(150);
  expect(new Set(ids)).toEqual(posted);
  expect(await metricValue(t.registry, 'boxrelay_sink_deliveries_total', { sink: 'redis', outcome: 'dead_lettered' })).toBe(0);
});
