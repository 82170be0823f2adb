import request from 'supertest';
import { describe, expect, it } from 'vitest';
import { awsMessage } from '../src/sinks/aws.js';
import { hookTransformOf } from '../src/sinks/transform.js';
import { cloudEvent } from './support/cloud-event.js';
import { engines } from './support/databases.js';
import { waitFor } from './support/fanout.js';
import { adminAuth, allDelivered, fanoutFixture, hook } from './support/fanout-relay.js';
import { headersOf, kafkaMock, receivedRecords } from './support/kafka.js';
import { collect, natsClient, SHARED_NATS, uniqueNames } from './support/nats.js';
import { SECRET, delivery, eventId, sendRaw } from './support/sign.js';

const PROD = 'whsec_cHJvZC1yZWNlaXZlcnMtc2VjcmV0LTAxMjM0NTY=';
const STAGING = 'whsec_c3RhZ2luZy1yZWNlaXZlcnMtc2VjcmV0LTAxMjM=';

const { server, relay, defer } = fanoutFixture();

describe.each(engines)('what receivers see of several accounts (contract section 21) on $name', (engine) => {
  it('one delivery id under three accounts reaches NATS, a hook and Kafka three times, with distinct receiver ids, the account (default included) and its source', async () => {
    const names = uniqueNames();
    const nats = await natsClient();
    defer(() => nats.close());
    nats.streams.push(names.stream);
    const published = collect(nats.nc, `${names.prefix}.>`);
    const receiver = await server();
    const kafka = await kafkaMock();
    defer(() => kafka.close());
    const t = await relay({
      database: await engine.migratedUrl(),
      kafkaBrokers: kafka.brokers,
      natsUrl: SHARED_NATS,
      natsSubjectPrefix: names.prefix,
      natsStream: names.stream,
      hooks: [hook('all', receiver.url, { secret: 'whsec_aG9vay1zZWNyZXQtcmVjZWl2ZXJzLTAxMjM0NQ==' })],
      accounts: [
        { name: 'prod', secrets: [PROD], cloudEventsSource: 'sandbox-production' },
        { name: 'staging', secrets: [STAGING] },
      ],
    });
    const id = eventId();
    for (const [path, secret] of [['/webhooks', SECRET], ['/webhooks/prod', PROD], ['/webhooks/staging', STAGING]] as const) {
      const d = delivery({ timestamp: t.clock.seconds, id, secret, boxId: 'bx_same', type: 'box.error' });
      expect((await sendRaw(request(t.relay.publicApp).post(path).set(d.headers), d.body)).body).toEqual({ ok: true, id, duplicate: false });
    }

    await waitFor(async () => receiver.requests.length === 3, 'the hook to get three events');
    const byHookId = Object.fromEntries(receiver.requests.map((r) => [r.headers['webhook-id'], JSON.parse(r.body) as Record<string, unknown>]));
    expect(Object.keys(byHookId).sort()).toEqual([id, `prod:${id}`, `staging:${id}`]);
    const seen = {
      [id]: { id, source: 'sandbox', subject: 'bx_same', boxrelayaccount: 'default' },
      [`prod:${id}`]: { id, source: 'sandbox-production', subject: 'bx_same', boxrelayaccount: 'prod' },
      [`staging:${id}`]: { id, source: 'sandbox/staging', subject: 'bx_same', boxrelayaccount: 'staging' },
    };
    expect(byHookId).toMatchObject(seen);

    // JetStream keeps all three: none is a duplicate of another within its window.
    const messages = await published.received(3);
    const byMsgId = Object.fromEntries(messages.map((m) => [m.headers?.get('Nats-Msg-Id'), m.json<Record<string, unknown>>()]));
    expect(Object.keys(byMsgId).sort()).toEqual([id, `prod:${id}`, `staging:${id}`]);
    expect(byMsgId).toMatchObject(seen);
    await waitFor(async () => (await nats.jsm.streams.info(names.stream)).state.messages === 3, 'three messages in the stream');

    // Kafka names the account in a header beside the event id (contract sections 18 and 21).
    await allDelivered(t, 'kafka');
    const records = await receivedRecords(kafka.brokers, 'sandbox.events', 3);
    expect(records.map((record) => [headersOf(record).ce_id, headersOf(record).ce_boxrelayaccount, JSON.parse(record.value).boxrelayaccount]).sort()).toEqual([
      [id, 'default', 'default'],
      [id, 'prod', 'prod'],
      [id, 'staging', 'staging'],
    ]);
  });
});

describe.each(engines)('operator events of several accounts (contract section 21) on $name', (engine) => {
  it('carry the account of the event they are about, and default when about a sink; a hook listing accounts gets only theirs', async () => {
    const names = uniqueNames();
    const nats = await natsClient();
    defer(() => nats.close());
    nats.streams.push(names.stream);
    const prodPrefix = `${names.prefix}-prod`;
    const announced = [collect(nats.nc, `${names.prefix}.boxrelay.>`), collect(nats.nc, `${prodPrefix}.boxrelay.>`)] as const;
    const bad = await server(() => 400);
    const ops = await server();
    const prodOps = await server();
    const t = await relay({
      database: await engine.migratedUrl(),
      natsUrl: SHARED_NATS,
      natsSubjectPrefix: names.prefix,
      natsStream: names.stream,
      hooks: [
        hook('bad', bad.url, { events: ['box.*'] }),
        hook('ops', ops.url, { events: ['boxrelay.*'] }),
        hook('prod-ops', prodOps.url, { events: ['boxrelay.*'], accounts: ['prod'] }),
      ],
      accounts: [{ name: 'prod', secrets: [PROD], natsSubjectPrefix: prodPrefix }],
    });
    const id = eventId();
    for (const [path, secret, boxId] of [['/webhooks', SECRET, 'bx_d'], ['/webhooks/prod', PROD, 'bx_p']] as const) {
      const d = delivery({ timestamp: t.clock.seconds, id, secret, boxId, type: 'box.error' });
      expect((await sendRaw(request(t.relay.publicApp).post(path).set(d.headers), d.body)).status).toBe(200);
    }
    await waitFor(async () => ops.requests.length === 2, "ops to hear of both dead letters");
    expect((await request(t.relay.internalApp).post('/admin/sinks/bad/pause').set(adminAuth)).status).toBe(200);
    await waitFor(async () => ops.requests.length === 3, 'ops to hear of the pause');

    const byHookId = Object.fromEntries(ops.requests.map((r) => [r.headers['webhook-id'] as string, JSON.parse(r.body) as Record<string, unknown>]));
    const of = (type: string, account: string) => Object.entries(byHookId).find(([, e]) => e.type === type && e.boxrelayaccount === account);
    const [prodHookId, prodDead] = of('boxrelay.event.dead_lettered', 'prod')!;
    const [defaultHookId, defaultDead] = of('boxrelay.event.dead_lettered', 'default')!;
    const [pausedHookId, paused] = of('boxrelay.sink.paused', 'default')!;
    // The ids in an announcement read as the account's events' do: the upstream's, beside the account.
    expect(prodDead).toMatchObject({ source: 'sandbox/boxrelay', subject: 'bx_p', data: { eventId: id, sink: 'bad' } });
    expect(prodHookId).toBe(`prod:${prodDead.id}`);
    expect(defaultDead).toMatchObject({ source: 'sandbox/boxrelay', subject: 'bx_d', data: { eventId: id, sink: 'bad' } });
    expect(defaultHookId).toBe(defaultDead.id);
    expect(paused).toMatchObject({ subject: 'bad', data: { sink: 'bad', by: 'operator' } });
    expect(pausedHookId).toBe(paused.id);

    expect(prodOps.requests.map((r) => JSON.parse(r.body) as Record<string, unknown>)).toEqual([prodDead]);
    const messages = [...(await announced[0].received(2)), ...(await announced[1].received(1))];
    expect(messages.map((m) => [m.subject, m.headers?.get('Nats-Msg-Id')]).sort()).toEqual(
      [
        [`${prodPrefix}.boxrelay.event.dead_lettered.bx_p`, prodHookId],
        [`${names.prefix}.boxrelay.event.dead_lettered.bx_d`, defaultHookId],
        [`${names.prefix}.boxrelay.sink.paused.bad`, pausedHookId],
      ].sort(),
    );
  });
});

describe('NATS subjects of several accounts (contract section 21)', () => {
  it("publish each account's events under its prefix, into one stream the relay creates, and extend a stream that lacks a prefix", async () => {
    const names = uniqueNames();
    const nats = await natsClient();
    defer(() => nats.close());
    nats.streams.push(names.stream);
    const prodPrefix = `${names.prefix}-prod`;
    const settings = { natsUrl: SHARED_NATS, natsSubjectPrefix: names.prefix, natsStream: names.stream };
    const first = await relay({ ...settings, accounts: [{ name: 'prod', secrets: [PROD], natsSubjectPrefix: prodPrefix }, { name: 'staging', secrets: [STAGING] }] });
    await waitFor(async () => (await nats.jsm.streams.info(names.stream).catch(() => undefined)) !== undefined, 'the stream to be created');
    expect((await nats.jsm.streams.info(names.stream)).config.subjects).toEqual([`${names.prefix}.>`, `${prodPrefix}.>`]);
    const id = eventId();
    for (const [path, secret] of [['/webhooks', SECRET], ['/webhooks/prod', PROD], ['/webhooks/staging', STAGING]] as const) {
      const d = delivery({ timestamp: first.clock.seconds, id, secret, boxId: 'bx_1', type: 'box.error' });
      expect((await sendRaw(request(first.relay.publicApp).post(path).set(d.headers), d.body)).status).toBe(200);
    }
    await waitFor(async () => (await nats.jsm.streams.info(names.stream)).state.messages === 3, 'three messages in the stream');
    const subjects = [];
    for (let seq = 1; seq <= 3; seq++) {
      const message = (await nats.jsm.streams.getMessage(names.stream, { seq }))!;
      subjects.push([message.subject, message.header.get('Nats-Msg-Id')]);
    }
    expect(subjects.sort()).toEqual(
      [
        [`${names.prefix}.box.error.bx_1`, id],
        [`${names.prefix}.box.error.bx_1`, `staging:${id}`],
        [`${prodPrefix}.box.error.bx_1`, `prod:${id}`],
      ].sort(),
    );
    await first.close();

    // A later configuration gives staging a prefix of its own: the stream takes it beside the others.
    const stagingPrefix = `${names.prefix}-staging`;
    await relay({ ...settings, accounts: [{ name: 'prod', secrets: [PROD], natsSubjectPrefix: prodPrefix }, { name: 'staging', secrets: [STAGING], natsSubjectPrefix: stagingPrefix }] });
    await waitFor(async () => ((await nats.jsm.streams.info(names.stream)).config.subjects ?? []).length === 3, 'the stream to take the new prefix');
    expect((await nats.jsm.streams.info(names.stream)).config.subjects).toEqual([`${names.prefix}.>`, `${prodPrefix}.>`, `${stagingPrefix}.>`]);
  });
});

describe('the FIFO deduplication id and CloudEvents attributes of SQS and SNS', () => {
  it('are the event id for default and <name>:<event id> for another account, each with its ce_boxrelayaccount', () => {
    const base = { specversion: '1.0', id: 'evt_1', source: 's', type: 'box.ready', subject: 'bx_1', time: 't', datacontenttype: 'application/json', data: {}, boxrelayaccount: 'default' } as const;
    const ofDefault = awsMessage(base, '{}', undefined, true);
    expect(ofDefault).toMatchObject({ deduplicationId: 'evt_1', groupId: 'bx_1', attributes: { ce_boxrelayaccount: { DataType: 'String', StringValue: 'default' } } });
    const ofProd = awsMessage({ ...base, boxrelayaccount: 'prod' }, '{}', undefined, true);
    expect(ofProd).toMatchObject({ deduplicationId: 'prod:evt_1', attributes: { ce_boxrelayaccount: { DataType: 'String', StringValue: 'prod' } } });
  });
});

describe('the PagerDuty dedup_key of several accounts', () => {
  it('is boxrelay-<boxId> for default and boxrelay-<name>-<boxId> for another account, trigger and resolve alike', () => {
    const pagerduty = hookTransformOf({ format: 'pagerduty', routingKey: 'R0123' })!;
    const keyOf = (type: string, account?: string) =>
      (JSON.parse(pagerduty.bodyOf({ ...cloudEvent({ box: { id: 'bx_1' }, state: 'error' }, type), ...(account ? { boxrelayaccount: account } : {}) })!.body) as { dedup_key: string }).dedup_key;
    expect([keyOf('box.error'), keyOf('box.ready')]).toEqual(['boxrelay-bx_1', 'boxrelay-bx_1']);
    expect([keyOf('box.error', 'prod'), keyOf('box.archived', 'prod')]).toEqual(['boxrelay-prod-bx_1', 'boxrelay-prod-bx_1']);
  });
});
