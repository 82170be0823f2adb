import { ReceiveMessageCommand } from '@aws-sdk/client-sqs';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../src/config/load.js';
import { createTracing } from '../src/tracing/tracing.js';
import { attributesOf, ownFauxqs, receiveAll, type OwnFauxqs } from './support/aws.js';
import { busUp, expectHeld, expectListed, otlpEndpoint, poster, readyz } from './support/buses.js';
import { engines } from './support/databases.js';
import { adminAuth, allDelivered, fanoutFixture, hook, metricValue, outboxRows, pendingCount } from './support/fanout-relay.js';
import { waitFor } from './support/fanout.js';
import { eventId } from './support/sign.js';
import type { TestRelay } from './support/relay.js';

const { defer, relay } = fanoutFixture();

/** One fauxqs for the file (each test makes queues and topics of fresh names); the outage test starts its own. */
let aws: OwnFauxqs;
beforeAll(async () => {
  aws = await ownFauxqs();
});
afterAll(() => aws.stop());

/** A delivery of a type that names no box (contract section 2 requires only the id). */
function boxlessDelivery() {
  const id = eventId();
  return { id, type: 'account.updated', body: JSON.stringify({ id, type: 'account.updated', createdAt: '2026-11-21T10:00:00Z', data: { plan: 'team' } }) };
}

const busTuning = { buses: { ackTimeoutMs: 2000, backoff: { minMs: 50, maxMs: 300 } } };

/** The sink's setting for a queue URL or topic ARN, on fauxqs. */
const settingsFor = (sink: 'sqs' | 'sns', target: string) => ({ awsEndpoint: aws.endpoint, awsRegion: 'us-east-1', ...(sink === 'sqs' ? { sqsQueueUrl: target } : { snsTopicArn: target }) });

/** Where a sink's messages are read: the queue itself, or a queue subscribed to the topic with raw delivery. */
async function target(sink: 'sqs' | 'sns', fifo = false): Promise<{ target: string; queue: string }> {
  const queue = await aws.queue({ fifo });
  if (sink === 'sqs') return { target: queue, queue };
  const topic = await aws.topic({ fifo });
  await aws.subscribe(topic, queue);
  return { target: topic, queue };
}

describe.each(engines)('SQS and SNS on $name', (engine) => {
  const relayFor = async (sink: 'sqs' | 'sns', on: string, extra: Record<string, unknown> = {}, options: Parameters<typeof relay>[1] = {}) => {
    const t = await relay({ database: await engine.migratedUrl(), ...settingsFor(sink, on), ...extra }, { ...busTuning, ...options });
    await busUp(t, sink);
    return t;
  };

  describe.each(['sqs', 'sns'] as const)('%s', (sink) => {
    it('one message per event: the CloudEvent JSON as body, attributes ce_id, ce_type, ce_subject, ce_boxrelayaccount, content-type and traceparent; the sink listed everywhere', async () => {
      const { target: on, queue } = await target(sink);
      const tracing = createTracing({ OTEL_EXPORTER_OTLP_ENDPOINT: await otlpEndpoint(defer), OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json', OTEL_BSP_SCHEDULE_DELAY: '50' });
      const t = await relayFor(sink, on, {}, { tracing });
      const posted: { id: string; type: string; subject: string | undefined }[] = [];
      for (const [type, boxId] of [['box.ready', 'bx_1'], ['box.error', 'bx.a*b> c']] as const) {
        const answer = await t.post({ type, boxId });
        expect(answer.status).toBe(200);
        posted.push({ id: answer.deliveryId, type, subject: boxId });
      }
      const boxless = boxlessDelivery();
      expect((await t.post(boxless)).status).toBe(200);
      posted.push({ id: boxless.id, type: boxless.type, subject: undefined });
      await allDelivered(t, sink);

      const messages = await receiveAll(aws.sqs, queue, 3);
      expect(messages).toHaveLength(3);
      const byId = new Map(messages.map((message) => [attributesOf(message).ce_id, message]));
      for (const { id, type, subject } of posted) {
        const message = byId.get(id)!;
        const attributes = attributesOf(message);
        expect(Object.keys(attributes).sort()).toEqual(['ce_id', 'ce_type', 'ce_boxrelayaccount', 'content-type', 'traceparent', ...(subject ? ['ce_subject'] : [])].sort());
        expect(attributes).toMatchObject({ ce_id: id, ce_type: type, ce_boxrelayaccount: 'default', 'content-type': 'application/cloudevents+json', ...(subject ? { ce_subject: subject } : {}) });
        expect(attributes.traceparent).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
        const event = JSON.parse(message.Body!);
        expect(event).toMatchObject({ specversion: '1.0', id, type, source: 'sandbox', boxrelayaccount: 'default' });
        expect(event.subject).toBe(subject);
      }
      await expectListed(t, sink, 3);
    });

    it('a FIFO queue or topic: group id the box id (_ without one), deduplication id the event id, each box in accepted order; a replay within five minutes adds nothing', async () => {
      const { target: on, queue } = await target(sink, true);
      const t = await relayFor(sink, on, { [`${sink}Ordering`]: 'per-box' });
      const since = new Date(t.clock.now() - 1000).toISOString();
      const accepted = new Map<string, string[]>();
      for (let i = 0; i < 30; i++) {
        const boxId = `bx_${i % 3}`;
        const answer = await t.post({ boxId });
        expect(answer.status).toBe(200);
        accepted.set(boxId, [...(accepted.get(boxId) ?? []), answer.deliveryId]);
      }
      const boxless = boxlessDelivery();
      expect((await t.post(boxless)).status).toBe(200);
      await allDelivered(t, sink);

      const messages = await receiveAll(aws.sqs, queue, 31);
      expect(messages).toHaveLength(31);
      for (const message of messages) {
        const { ce_id, ce_subject } = attributesOf(message);
        expect([message.Attributes?.MessageGroupId, message.Attributes?.MessageDeduplicationId]).toEqual([ce_subject ?? '_', ce_id]);
      }
      for (const [boxId, ids] of accepted) {
        expect(messages.filter((message) => attributesOf(message).ce_subject === boxId).map((message) => attributesOf(message).ce_id), boxId).toEqual(ids);
      }
      expect(attributesOf(messages.find((message) => message.Attributes?.MessageGroupId === '_')!).ce_id).toBe(boxless.id);

      const replay = await request(t.relay.internalApp).post('/admin/replay').set(adminAuth).send({ since, sink });
      expect(replay.body).toEqual({ ok: true, queued: 31 });
      await allDelivered(t, sink);
      expect(await metricValue(t.registry, 'boxrelay_sink_deliveries_total', { sink, outcome: 'delivered' })).toBe(62);
      const again = await aws.sqs.send(new ReceiveMessageCommand({ QueueUrl: queue, MaxNumberOfMessages: 10 }));
      expect(again.Messages ?? []).toEqual([]);
    });

    it('a replay to a standard queue or topic sends the events again', async () => {
      const { target: on, queue } = await target(sink);
      const t = await relayFor(sink, on);
      const since = new Date(t.clock.now() - 1000).toISOString();
      for (let i = 0; i < 4; i++) expect((await t.post({ boxId: `bx_${i}` })).status).toBe(200);
      await allDelivered(t, sink);
      expect(await receiveAll(aws.sqs, queue, 4)).toHaveLength(4);
      const replay = await request(t.relay.internalApp).post('/admin/replay').set(adminAuth).send({ since, sink });
      expect(replay.body).toEqual({ ok: true, queued: 4 });
      await allDelivered(t, sink);
      expect(await receiveAll(aws.sqs, queue, 4)).toHaveLength(4);
    });

    it('dead-letters at once a message over the size limit, while the others keep flowing', async () => {
      // SNS takes 256 KiB; SQS 1 MiB unless the queue says less (this one: 256 KiB, the classic limit).
      const queue = await aws.queue({ attributes: { MaximumMessageSize: '262144' } });
      let on = queue;
      if (sink === 'sns') {
        on = await aws.topic();
        await aws.subscribe(on, queue);
      }
      const t = await relayFor(sink, on, { maxBodyBytes: 600_000 });
      const { posted, post } = poster(t);
      await post(0, 3);
      const bigId = eventId();
      const big = await t.post({ id: bigId, body: JSON.stringify({ id: bigId, type: 'box.ready', createdAt: '2026-11-21T10:00:00Z', data: { box: { id: 'bx_big' }, blob: 'x'.repeat(270_000) } }) });
      expect(big.status).toBe(200);
      await post(3, 6);
      await waitFor(async () => (await pendingCount(t, sink)) === 0 && (await outboxRows(t, sink)).length === 1, 'the others delivered and one dead letter');
      const [dead] = await outboxRows(t, sink);
      expect([dead!.delivery_id, dead!.status, dead!.attempts]).toEqual([big.deliveryId, 'dead', 1]);
      expect(dead!.last_error).toMatch(new RegExp(`^${sink}_`));
      const received = await receiveAll(aws.sqs, queue, 6);
      expect(new Set(received.map((message) => attributesOf(message).ce_id))).toEqual(posted);
      expect((await readyz(t)).checks[sink]).toBe('ok');
    });

    it('dead-letters every event at once when the queue or topic does not exist; /readyz stays ok (the endpoint answers)', async () => {
      const missing = sink === 'sqs' ? `${aws.endpoint}/000000000000/missing-queue` : 'arn:aws:sns:us-east-1:000000000000:missing-topic';
      const t = await relayFor(sink, missing);
      const answer = await t.post({ boxId: 'bx_1' });
      await waitFor(async () => (await outboxRows(t, sink)).some((row) => row.delivery_id === answer.deliveryId && row.status === 'dead'), 'a dead letter');
      const [dead] = await outboxRows(t, sink);
      expect(dead!.attempts).toBe(1);
      expect(dead!.last_error).toMatch(sink === 'sqs' ? /^sqs_(queue_does_not_exist|non_existent_queue): / : /^sns_not_found(_exception)?: /);
    });
  });

  it('operator events go to the queue too', async () => {
    const queue = await aws.queue();
    const t = await relayFor('sqs', queue, { hooks: [hook('alerts', 'http://127.0.0.1:9/h', { events: ['box.never'] })] });
    await request(t.relay.internalApp).post('/admin/sinks/alerts/pause').set(adminAuth).expect(200);
    const [message] = await receiveAll(aws.sqs, queue, 1);
    expect(attributesOf(message!)).toMatchObject({ ce_type: 'boxrelay.sink.paused', ce_subject: 'alerts' });
  });

  it('holds events while the endpoint is down (/readyz down, 200 to the sender) and sends every one when it is back', async () => {
    const own = await ownFauxqs({ persist: true });
    defer(() => own.stop({ kill: true }));
    const queue = await own.queue();
    const t: TestRelay = await relay({ database: await engine.migratedUrl(), awsEndpoint: own.endpoint, sqsQueueUrl: queue }, { buses: { ackTimeoutMs: 1000, backoff: { minMs: 50, maxMs: 300 } } });
    await busUp(t, 'sqs');
    const { posted, post } = poster(t);
    await post(0, 10);
    await allDelivered(t, 'sqs');

    await own.stop({ kill: true });
    await post(10, 30);
    await waitFor(async () => (await readyz(t)).checks.sqs === 'down', 'SQS to be seen down');
    await expectHeld(t, 'sqs', 19);

    await own.start();
    await busUp(t, 'sqs');
    await allDelivered(t, 'sqs', 30_000);
    const ids = (await receiveAll(own.sqs, queue, 30)).map((message) => attributesOf(message).ce_id);
    expect(new Set(ids)).toEqual(posted);
    expect(await metricValue(t.registry, 'boxrelay_sink_deliveries_total', { sink: 'sqs', outcome: 'dead_lettered' })).toBe(0);
  }, 60_000);
});

describe('configuration (contract section 20)', () => {
  it('reads every variable, with the contract defaults; each sink off unless its own variable is set', () => {
    const off = loadConfig({ env: { BOXRELAY_SECRETS: 'whsec_x' } });
    expect([off.awsRegion, off.awsEndpoint, off.sqsQueueUrl, off.snsTopicArn, off.s3Archive, off.s3ArchiveMaxEvents, off.s3ArchiveMaxAge]).toEqual([
      undefined,
      undefined,
      undefined,
      undefined,
      undefined,
      1000,
      300_000,
    ]);
    expect(loadConfig({ env: { BOXRELAY_SECRETS: 'whsec_x', AWS_REGION: 'eu-central-1' } }).awsRegion).toBe('eu-central-1');
    const on = loadConfig({
      env: {
        BOXRELAY_SECRETS: 'whsec_x',
        AWS_REGION: 'eu-central-1',
        BOXRELAY_AWS_REGION: 'eu-west-1',
        BOXRELAY_AWS_ENDPOINT: 'http://127.0.0.1:4566',
        BOXRELAY_SQS_QUEUE_URL: 'https://sqs.eu-west-1.amazonaws.com/123456789012/events.fifo',
        BOXRELAY_SQS_ORDERING: 'per-box',
        BOXRELAY_SNS_TOPIC_ARN: 'arn:aws:sns:eu-west-1:123456789012:events',
        BOXRELAY_SNS_ORDERING: 'per-box',
        BOXRELAY_S3_ARCHIVE: 's3://archive-bucket/relay/prod',
        BOXRELAY_S3_ARCHIVE_MAX_EVENTS: '50',
        BOXRELAY_S3_ARCHIVE_MAX_AGE: '30s',
      },
    });
    expect(on).toMatchObject({
      awsRegion: 'eu-west-1',
      awsEndpoint: 'http://127.0.0.1:4566',
      sqsQueueUrl: 'https://sqs.eu-west-1.amazonaws.com/123456789012/events.fifo',
      sqsOrdering: 'per-box',
      snsTopicArn: 'arn:aws:sns:eu-west-1:123456789012:events',
      snsOrdering: 'per-box',
      s3Archive: 's3://archive-bucket/relay/prod',
      s3ArchiveMaxEvents: 50,
      s3ArchiveMaxAge: 30_000,
    });
  });

  it('refuses bad values with one line each, naming the variable', () => {
    const env = {
      BOXRELAY_SECRETS: 'whsec_x',
      BOXRELAY_SQS_QUEUE_URL: 'not a url',
      BOXRELAY_SNS_TOPIC_ARN: 'events',
      BOXRELAY_S3_ARCHIVE: 'https://bucket',
      BOXRELAY_S3_ARCHIVE_MAX_EVENTS: '0',
    };
    const error = (() => {
      try {
        loadConfig({ env });
      } catch (caught) {
        return caught;
      }
    })();
    expect(error).toBeInstanceOf(ConfigError);
    const text = (error as ConfigError).message;
    for (const name of ['BOXRELAY_SQS_QUEUE_URL', 'BOXRELAY_SNS_TOPIC_ARN', 'BOXRELAY_S3_ARCHIVE', 'BOXRELAY_S3_ARCHIVE_MAX_EVENTS']) expect(text).toContain(name);
  });
});
