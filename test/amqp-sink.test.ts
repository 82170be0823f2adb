import { Connection } from 'rabbitmq-client';
import request from 'supertest';
import { expect, it } from 'vitest';
import { subjectToken } from '../src/sinks/nats-subject.js';
import { HOSTILE_BOX_IDS, busUp, expectHeld, expectListed, poster, readyz, SHARED_AMQP, amqpCollector, amqpVhost, rabbitmqctl, uniqueName } from './support/buses.js';
import { adminAuth, allDelivered, fanoutFixture, metricValue, outboxRows, pendingCount } from './support/fanout-relay.js';
import { waitFor } from './support/fanout.js';

const { defer, relay } = fanoutFixture();


it('publishes persistent messages on the topic exchange with the contract properties, and lists the sink everywhere', async () => {
  const exchange = uniqueName();
  const t = await relay({ amqpUrl: SHARED_AMQP, amqpExchange: exchange });
  await busUp(t, 'amqp');
  const consumer = await amqpCollector(exchange);
  defer(() => consumer.close());

  const posted = [];
  for (const [type, boxId] of [['box.ready', 'bx_1'], ['box.error', 'bx_abc'], ['box.archived', 'bx_2']] as const) {
    const createdAt = '2026-11-21T10:00:00.123Z';
    const answer = await t.post({ type, boxId, createdAt });
    expect(answer.status).toBe(200);
    posted.push({ id: answer.deliveryId, type, boxId });
  }
  const messages = await consumer.received(3);
  for (const [i, { id, type, boxId }] of posted.entries()) {
    const message = messages[i]!;
    expect(message.routingKey).toBe(`${type}.${boxId}`);
    expect(message.exchange).toBe(exchange);
    expect(message.durable).toBe(true);
    expect(message.contentType).toBe('application/cloudevents+json');
    expect(message.messageId).toBe(id);
    expect(message.type).toBe(type);
    expect(message.timestamp).toBe(Math.floor(Date.parse('2026-11-21T10:00:00.123Z') / 1000));
    const body = JSON.parse(Buffer.from(message.body as Buffer).toString('utf8'));
    expect(body).toMatchObject({ specversion: '1.0', id, type, subject: boxId, time: '2026-11-21T10:00:00.123Z' });
  }
  expect(messages[1]!.routingKey).toBe('box.error.bx_abc');
  await allDelivered(t, 'amqp');

  await expectListed(t, 'amqp', 3);
});

it('declares a durable queue bound with # when BOXRELAY_AMQP_QUEUE is set, so nothing is dropped before consumers bind', async () => {
  const exchange = uniqueName();
  const queue = `${exchange}-all`;
  const t = await relay({ amqpUrl: SHARED_AMQP, amqpExchange: exchange, amqpQueue: queue });
  defer(() => rabbitmqctl('delete_queue', queue));
  await busUp(t, 'amqp');
  for (let i = 0; i < 4; i++) expect((await t.post({ boxId: `bx_${i}` })).status).toBe(200);
  await allDelivered(t, 'amqp');
  const queues = await rabbitmqctl('list_queues', '-q', '--no-table-headers', 'name', 'durable', 'messages');
  expect(queues.split('\n').map((line) => line.trim().split(/\s+/)).find(([name]) => name === queue)).toEqual([queue, 'true', '4']);
});

it('routes hostile box ids and types by the section 4 token rule: no event lands on another box key', async () => {
  const exchange = uniqueName();
  const t = await relay({ amqpUrl: SHARED_AMQP, amqpExchange: exchange });
  await busUp(t, 'amqp');
  const consumer = await amqpCollector(exchange);
  defer(() => consumer.close());
  for (const boxId of HOSTILE_BOX_IDS) expect((await t.post({ type: 'box.error', boxId })).status).toBe(200);
  expect((await t.post({ type: 'box.#.*', boxId: 'bx' })).status).toBe(200);
  const messages = await consumer.received(HOSTILE_BOX_IDS.length + 1);
  const keys = messages.map((m) => m.routingKey);
  expect(keys).toEqual([...HOSTILE_BOX_IDS.map((boxId) => `box.error.${subjectToken(boxId)}`), 'box._._.bx']);
  for (const key of keys) expect(key).toMatch(/^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)+$/);
  expect(keys.slice(0, 3)).toEqual(['box.error.bx_a', 'box.error.bx_', 'box.error.bx_']);
  // Each message keeps its raw box id: the key only routes.
  expect(messages.map((m) => JSON.parse(Buffer.from(m.body as Buffer).toString()).subject)).toEqual([...HOSTILE_BOX_IDS, 'bx']);
});

it('dead-letters an event whose routing key the broker refuses (topic permissions) within a minute, while the others flow', async () => {
  const vhost = await amqpVhost();
  defer(() => vhost.close());
  const exchange = uniqueName();
  // The user may write only box.ready.* keys on the exchange.
  await rabbitmqctl('set_topic_permissions', '-p', vhost.vhost, vhost.user, exchange, '^box\\.ready\\.', '.*');
  const t = await relay({ amqpUrl: vhost.url, amqpExchange: exchange });
  await busUp(t, 'amqp');
  const consumer = await amqpCollector(exchange, `amqp://guest:guest@127.0.0.1:5672/${vhost.vhost}`);
  defer(() => consumer.close());

  const refused = await t.post({ type: 'box.error', boxId: 'bx_denied' });
  const allowed = [];
  for (let i = 0; i < 20; i++) allowed.push((await t.post({ type: 'box.ready', boxId: `bx_${i}` })).deliveryId);
  const started = Date.now();
  await waitFor(async () => (await outboxRows(t, 'amqp')).some((row) => row.status === 'dead'), 'the refused event to be a dead letter', 60_000);
  expect(Date.now() - started).toBeLessThan(60_000);
  const dead = await request(t.relay.internalApp).get('/admin/dead-letters?sink=amqp').set(adminAuth);
  expect(dead.body.deadLetters.map((d: { eventId: string }) => d.eventId)).toEqual([refused.deliveryId]);
  expect(dead.body.deadLetters[0].lastError).toMatch(/^amqp_access_refused/);
  const received = await consumer.received(20);
  expect(new Set(received.map((m) => m.messageId))).toEqual(new Set(allowed));
  await waitFor(async () => (await outboxRows(t, 'amqp')).filter((row) => row.status !== 'dead').length === 0, 'the allowed events to be delivered');
  expect((await readyz(t)).checks.amqp).toBe('ok');
  expect(await metricValue(t.registry, 'boxrelay_sink_deliveries_total', { sink: 'amqp', outcome: 'dead_lettered' })).toBe(1);
}, 90_000);

it('keeps answering 200 while the connection is closed and refused, shows it on /readyz, and publishes every event when it is back', async () => {
  const vhost = await amqpVhost();
  defer(() => vhost.close());
  const exchange = uniqueName();
  const t = await relay({ amqpUrl: vhost.url, amqpExchange: exchange }, { buses: { ackTimeoutMs: 1000, backoff: { minMs: 50, maxMs: 300 } } });
  await busUp(t, 'amqp');
  const consumer = await amqpCollector(exchange, `amqp://guest:guest@127.0.0.1:5672/${vhost.vhost}`);
  defer(() => consumer.close());

  const { posted, post } = poster(t);
  await post(0, 30);
  // Closed by the broker, and kept out (no rights on the vhost) until the rights come back.
  await rabbitmqctl('clear_permissions', '-p', vhost.vhost, vhost.user);
  await rabbitmqctl('close_all_connections', '-p', vhost.vhost, '--limit', '100', 'test: broker outage');
  await waitFor(async () => (await readyz(t)).checks.amqp === 'down', 'RabbitMQ to be seen down');
  await post(30, 60);
  await expectHeld(t, 'amqp', 30);

  await rabbitmqctl('set_permissions', '-p', vhost.vhost, vhost.user, '.*', '.*', '.*');
  await allDelivered(t, 'amqp', 30_000);
  // At least once: every event arrived, each message carrying its event id.
  await waitFor(() => posted.size <= new Set(consumer.messages.map((m) => m.messageId)).size, 'every event to arrive');
  expect(new Set(consumer.messages.map((m) => m.messageId))).toEqual(posted);
  expect(await metricValue(t.registry, 'boxrelay_sink_deliveries_total', { sink: 'amqp', outcome: 'dead_lettered' })).toBe(0);
}, 90_000);

it('shows a declaration the broker refuses on /readyz and in the log, and holds the work pending', async () => {
  const exchange = uniqueName();
  // An exchange of that name but another type: declaring the topic exchange fails (PRECONDITION_FAILED).
  const other = new Connection(SHARED_AMQP);
  defer(async () => {
    await other.exchangeDelete({ exchange });
    await other.close();
  });
  await other.exchangeDeclare({ exchange, type: 'direct', durable: true });
  const t = await relay({ amqpUrl: SHARED_AMQP, amqpExchange: exchange });
  const refused = await waitFor(async () => {
    const body = await readyz(t);
    return body.checks.amqp === 'error' ? body : undefined;
  }, 'the refused declaration to show');
  expect(refused.ok).toBe(true);
  expect(refused.errors?.amqp).toMatch(new RegExp(`^RabbitMQ refused declaring exchange ${exchange}: .*inequivalent arg 'type'`));
  await t.logs.waitFor((entry) => typeof entry.msg === 'string' && entry.msg.startsWith(`RabbitMQ refused declaring exchange ${exchange}`));
  expect((await t.post()).status).toBe(200);
  expect(await pendingCount(t, 'amqp')).toBe(1);
  expect(await outboxRows(t, 'amqp')).toEqual([]);
  expect(await metricValue(t.registry, 'boxrelay_sink_up', { sink: 'amqp' })).toBe(0);
});
