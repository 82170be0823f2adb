import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import request from 'supertest';
import { beforeAll, describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../src/config/load.js';
import { createTracing } from '../src/tracing/tracing.js';
import { HOSTILE_BOX_IDS, busUp, otlpEndpoint, expectHeld, expectListed, poster, readyz } from './support/buses.js';
import { adminAuth, allDelivered, fanoutFixture, hook, metricValue, outboxRows, pendingCount } from './support/fanout-relay.js';
import { waitFor } from './support/fanout.js';
import { KAFKA_ERRORS, headersOf, kafkaMock, receivedRecords, recordIds, topicRecords, type KafkaMock } from './support/kafka.js';
import { requireBuild, runCli } from './support/process.js';
import { SECRET, delivery, eventId } from './support/sign.js';

const { defer, relay, serve } = fanoutFixture();

/** The contract's default topic: each test has a mock cluster of its own. */
const TOPIC = 'sandbox.events';

async function cluster(): Promise<KafkaMock> {
  const mock = await kafkaMock();
  defer(() => mock.close());
  return mock;
}

/** A delivery of a type that names no box (contract section 2 requires only the id). */
function boxlessDelivery() {
  const id = eventId();
  return { id, type: 'account.updated', body: JSON.stringify({ id, type: 'account.updated', createdAt: '2026-11-21T10:00:00Z', data: { plan: 'team' } }) };
}

describe('records', () => {
  it('one record per event in structured mode: key the box id (_ without a box), the CloudEvent as value, content-type, ce_id, ce_boxrelayaccount and traceparent headers; the sink listed everywhere', async () => {
    const mock = await cluster();
    const tracing = createTracing({ OTEL_EXPORTER_OTLP_ENDPOINT: await otlpEndpoint(defer), OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json', OTEL_BSP_SCHEDULE_DELAY: '50' });
    const t = await relay({ kafkaBrokers: mock.brokers }, { tracing });
    await busUp(t, 'kafka');

    const posted: { id: string; type: string; key: string }[] = [];
    for (const [type, boxId] of [['box.ready', 'bx_1'], ['box.error', 'bx_abc'], ['box.archived', 'bx_1']] as const) {
      const answer = await t.post({ type, boxId });
      expect(answer.status).toBe(200);
      posted.push({ id: answer.deliveryId, type, key: boxId });
    }
    const boxless = boxlessDelivery();
    expect((await t.post(boxless)).status).toBe(200);
    posted.push({ id: boxless.id, type: boxless.type, key: '_' });
    await allDelivered(t, 'kafka');

    const records = await receivedRecords(mock.brokers, TOPIC, 4);
    expect(records).toHaveLength(4);
    const byId = new Map(records.map((record) => [headersOf(record).ce_id, record]));
    for (const { id, type, key } of posted) {
      const record = byId.get(id)!;
      expect(record.key).toBe(key);
      expect(record.headers.map(([name]) => name)).toEqual(['content-type', 'ce_id', 'ce_boxrelayaccount', 'traceparent']);
      expect(headersOf(record)['content-type']).toBe('application/cloudevents+json');
      expect(headersOf(record).ce_boxrelayaccount).toBe('default');
      expect(headersOf(record).traceparent).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
      const event = JSON.parse(record.value);
      expect(event).toMatchObject({ specversion: '1.0', id, type, source: 'sandbox', datacontenttype: 'application/json', boxrelayaccount: 'default' });
      expect(event.subject).toBe(key === '_' ? undefined : key);
    }
    // One key, one partition.
    expect(byId.get(posted[0]!.id)!.partition).toBe(byId.get(posted[2]!.id)!.partition);

    await expectListed(t, 'kafka', 4);
  });

  it('keys each record by the raw box id, hostile ones included, and keeps it as the subject; no traceparent without tracing', async () => {
    const mock = await cluster();
    const t = await relay({ kafkaBrokers: mock.brokers });
    await busUp(t, 'kafka');
    for (const boxId of HOSTILE_BOX_IDS) expect((await t.post({ type: 'box.error', boxId })).status).toBe(200);
    await allDelivered(t, 'kafka');
    const records = await receivedRecords(mock.brokers, TOPIC, HOSTILE_BOX_IDS.length);
    expect(records.map((r) => r.key).sort()).toEqual([...HOSTILE_BOX_IDS].sort());
    for (const record of records) {
      expect(JSON.parse(record.value).subject).toBe(record.key);
      expect(record.headers.map(([name]) => name)).toEqual(['content-type', 'ce_id', 'ce_boxrelayaccount']);
    }
  });

  it('per-box ordering: each box\'s records in one partition, in the order the relay accepted them', async () => {
    const mock = await cluster();
    await mock.createTopic(TOPIC, 4);
    const t = await relay({ kafkaBrokers: mock.brokers, kafkaOrdering: 'per-box' });
    await busUp(t, 'kafka');
    const accepted = new Map<string, string[]>();
    for (let i = 0; i < 60; i++) {
      const boxId = `bx_${i % 6}`;
      const answer = await t.post({ boxId });
      expect(answer.status).toBe(200);
      accepted.set(boxId, [...(accepted.get(boxId) ?? []), answer.deliveryId]);
    }
    await allDelivered(t, 'kafka');
    const records = await receivedRecords(mock.brokers, TOPIC, 60);
    expect(records).toHaveLength(60);
    for (const [boxId, ids] of accepted) {
      const ofBox = records.filter((record) => record.key === boxId);
      expect(new Set(ofBox.map((record) => record.partition)).size, boxId).toBe(1);
      expect(recordIds(ofBox), boxId).toEqual(ids);
    }
    // The keys spread over the partitions (Java's murmur2 partitioner, as other clients place them).
    expect(new Set(records.map((record) => record.partition)).size).toBeGreaterThan(1);
  });

  it('a re-sent delivery adds no record; a replay for kafka adds the records again', async () => {
    const mock = await cluster();
    const t = await relay({ kafkaBrokers: mock.brokers });
    await busUp(t, 'kafka');
    const since = new Date(t.clock.now() - 1000).toISOString();
    const first = await t.post({ boxId: 'bx_dup' });
    const again = await t.post({ boxId: 'bx_dup', id: first.deliveryId });
    expect([first.status, again.status, again.body.duplicate]).toEqual([200, 200, true]);
    for (let i = 0; i < 4; i++) expect((await t.post({ boxId: `bx_${i}` })).status).toBe(200);
    await allDelivered(t, 'kafka');
    const once = await receivedRecords(mock.brokers, TOPIC, 5);
    expect(once).toHaveLength(5);
    expect(recordIds(once).filter((id) => id === first.deliveryId)).toHaveLength(1);

    const replay = await request(t.relay.internalApp).post('/admin/replay').set(adminAuth).send({ since, sink: 'kafka' });
    expect(replay.body).toEqual({ ok: true, queued: 5 });
    await allDelivered(t, 'kafka');
    const twice = await receivedRecords(mock.brokers, TOPIC, 10);
    expect(twice).toHaveLength(10);
    const counts = new Map<string, number>();
    for (const id of recordIds(twice)) counts.set(id, (counts.get(id) ?? 0) + 1);
    expect([...counts.values()]).toEqual([2, 2, 2, 2, 2]);
    expect(await metricValue(t.registry, 'boxrelay_sink_deliveries_total', { sink: 'kafka', outcome: 'delivered' })).toBe(10);
  });
});

describe('faults', () => {
  it('holds 20 events while the broker is down (/readyz kafka down, 200 to the sender) and delivers every one when it is back', async () => {
    const mock = await cluster();
    const t = await relay({ kafkaBrokers: mock.brokers }, { buses: { ackTimeoutMs: 1000, backoff: { minMs: 50, maxMs: 300 } } });
    await busUp(t, 'kafka');
    const { posted, post } = poster(t);
    await post(0, 10);
    await allDelivered(t, 'kafka');

    await mock.down();
    await post(10, 30);
    await waitFor(async () => (await readyz(t)).checks.kafka === 'down', 'Kafka to be seen down');
    await expectHeld(t, 'kafka', 20);

    await mock.up();
    await busUp(t, 'kafka');
    await allDelivered(t, 'kafka', 30_000);
    // At least once: every event arrived, each record carrying its event id; none dead.
    const records = await receivedRecords(mock.brokers, TOPIC, 30);
    expect(new Set(recordIds(records))).toEqual(posted);
    expect(await metricValue(t.registry, 'boxrelay_sink_deliveries_total', { sink: 'kafka', outcome: 'dead_lettered' })).toBe(0);
  }, 60_000);

  it('dead-letters an event the cluster refuses for good (topic authorization, record too large, unknown topic) at once, while later events flow', async () => {
    const mock = await cluster();
    const t = await relay({ kafkaBrokers: mock.brokers });
    await busUp(t, 'kafka');
    const refused: [string, string][] = [];
    const refusals = [
      [KAFKA_ERRORS.TOPIC_AUTHORIZATION_FAILED, 'topic_authorization_failed', 1],
      [KAFKA_ERRORS.MESSAGE_TOO_LARGE, 'message_too_large', 1],
      // Retriable in Kafka (a topic being created): refused once the client's 3 tries all got it.
      [KAFKA_ERRORS.UNKNOWN_TOPIC_OR_PARTITION, 'unknown_topic_or_partition', 3],
    ] as const;
    for (const [code, reason, times] of refusals) {
      await mock.failProduce(code, times);
      const answer = await t.post({ boxId: `bx_${reason}` });
      await waitFor(async () => (await outboxRows(t, 'kafka')).some((row) => row.delivery_id === answer.deliveryId && row.status === 'dead'), `the ${reason} event to be a dead letter`);
      refused.push([answer.deliveryId, reason]);
    }
    const { posted, post } = poster(t);
    await post(0, 20);
    await waitFor(async () => (await pendingCount(t, 'kafka')) === 0 && (await outboxRows(t, 'kafka')).every((row) => row.status === 'dead'), 'the later events to be delivered');

    const dead = await request(t.relay.internalApp).get('/admin/dead-letters?sink=kafka').set(adminAuth);
    const lastErrors = new Map(dead.body.deadLetters.map((d: { eventId: string; lastError: string }) => [d.eventId, d.lastError]));
    expect([...lastErrors.keys()].sort()).toEqual(refused.map(([id]) => id).sort());
    for (const [id, reason] of refused) expect(lastErrors.get(id)).toMatch(new RegExp(`^kafka_${reason}: `));
    // Each refused at its first attempt, not retried.
    for (const row of await outboxRows(t, 'kafka')) expect(row.status === 'dead' ? row.attempts : 1).toBe(1);
    const records = await receivedRecords(mock.brokers, TOPIC, 20);
    expect(new Set(recordIds(records))).toEqual(posted);
    expect((await readyz(t)).checks.kafka).toBe('ok');
    expect(await metricValue(t.registry, 'boxrelay_sink_deliveries_total', { sink: 'kafka', outcome: 'dead_lettered' })).toBe(3);
  });

  it('a refused request of several records is sent again record by record: only a record refused alone is a dead letter', async () => {
    const mock = await cluster();
    const t = await relay({ kafkaBrokers: mock.brokers });
    await busUp(t, 'kafka');
    // Held by a pause, then claimed together on resume: the records of one turn share a request.
    await request(t.relay.internalApp).post('/admin/sinks/kafka/pause').set(adminAuth).expect(200);
    const { posted, post } = poster(t);
    await post(0, 10);
    await mock.failProduce(KAFKA_ERRORS.TOPIC_AUTHORIZATION_FAILED);
    await request(t.relay.internalApp).post('/admin/sinks/kafka/resume').set(adminAuth).expect(200);
    await allDelivered(t, 'kafka');
    expect(new Set(recordIds(await receivedRecords(mock.brokers, TOPIC, 10)))).toEqual(posted);
    expect(await metricValue(t.registry, 'boxrelay_sink_deliveries_total', { sink: 'kafka', outcome: 'dead_lettered' })).toBe(0);
  });

  it('hands the SASL and TLS settings to the client: the mock speaks neither, so the sink stays down with the reason logged, never the password', async () => {
    const mock = await cluster();
    const sasl = await relay({ kafkaBrokers: mock.brokers, kafkaSaslMechanism: 'scram-sha-512', kafkaSaslUsername: 'relay', kafkaSaslPassword: 'hunter2-kafka' });
    const saslRefused = await sasl.logs.waitFor((entry) => entry.msg === 'Kafka unreachable; deliveries wait in the outbox');
    expect(JSON.stringify(saslRefused.err)).toMatch(/does not support the requested API version/);
    const tls = await relay({ kafkaBrokers: mock.brokers, kafkaTls: 'true' });
    const tlsRefused = await tls.logs.waitFor((entry) => entry.msg === 'Kafka unreachable; deliveries wait in the outbox');
    expect(JSON.stringify(tlsRefused.err)).toMatch(/ECONNRESET|SSL|TLS|socket disconnected/i);
    for (const t of [sasl, tls]) {
      expect((await readyz(t)).checks.kafka).toBe('down');
      expect((await t.post()).status).toBe(200);
      expect(await pendingCount(t, 'kafka')).toBe(1);
    }
    expect(sasl.logs.text()).not.toContain('hunter2-kafka');
  });

  it('pause holds the events and resume sends them; operator events about other sinks go to the topic keyed by their subject', async () => {
    const mock = await cluster();
    // One partition: the records read back in the order they were produced.
    await mock.createTopic(TOPIC, 1);
    const t = await relay({ kafkaBrokers: mock.brokers, hooks: [hook('alerts', 'http://127.0.0.1:9/h', { events: ['box.never'] })] });
    await busUp(t, 'kafka');

    const paused = await request(t.relay.internalApp).post('/admin/sinks/kafka/pause').set(adminAuth);
    expect(paused.body.sink).toMatchObject({ name: 'kafka', kind: 'kafka', paused: true });
    const held = await t.post({ boxId: 'bx_held' });
    expect(held.status).toBe(200);
    expect(await pendingCount(t, 'kafka')).toBe(1);
    expect(await topicRecords(mock.brokers, TOPIC)).toEqual([]);
    await request(t.relay.internalApp).post('/admin/sinks/kafka/resume').set(adminAuth).expect(200);
    expect(recordIds(await receivedRecords(mock.brokers, TOPIC, 1))).toEqual([held.deliveryId]);

    await request(t.relay.internalApp).post('/admin/sinks/alerts/pause').set(adminAuth).expect(200);
    await request(t.relay.internalApp).post('/admin/sinks/alerts/resume').set(adminAuth).expect(200);
    const records = await receivedRecords(mock.brokers, TOPIC, 3);
    const announced = records.slice(1).map((record) => [record.key, JSON.parse(record.value).type, JSON.parse(record.value).subject]);
    expect(announced).toEqual([
      ['alerts', 'boxrelay.sink.paused', 'alerts'],
      ['alerts', 'boxrelay.sink.resumed', 'alerts'],
    ]);
  });
});

describe('`boxrelay serve` (the built CLI, fan-out in its worker thread)', () => {
  beforeAll(requireBuild);

  it('names kafka on /readyz from the worker and publishes to the topic', async () => {
    const mock = await cluster();
    const relayProcess = await serve({
      BOXRELAY_SECRETS: SECRET,
      BOXRELAY_DATABASE: join(mkdtempSync(join(tmpdir(), 'boxrelay-kafka-')), 'relay.db'),
      BOXRELAY_KAFKA_BROKERS: mock.brokers,
      BOXRELAY_KAFKA_TOPIC: 'box.lifecycle',
    });
    const readyz = async () => ((await (await fetch(`http://127.0.0.1:${relayProcess.internalPort}/readyz`)).json()) as { checks: Record<string, string> }).checks;
    await waitFor(async () => (await readyz()).kafka === 'ok', 'kafka to be up');
    expect(await readyz()).toEqual({ storage: 'ok', kafka: 'ok' });
    const d = delivery({ timestamp: Math.floor(Date.now() / 1000), type: 'box.error', boxId: 'bx_w' });
    expect((await fetch(`http://127.0.0.1:${relayProcess.port}/webhooks`, { method: 'POST', headers: d.headers, body: d.body })).status).toBe(200);
    const [record] = await receivedRecords(mock.brokers, 'box.lifecycle', 1);
    expect([record!.key, headersOf(record!).ce_id]).toEqual(['bx_w', d.id]);
  });
});

describe('configuration (contract section 18)', () => {
  beforeAll(requireBuild);

  it('reads every variable, with the contract defaults; off unless BOXRELAY_KAFKA_BROKERS is set', () => {
    const defaults = loadConfig({ env: {} });
    expect([defaults.kafkaBrokers, defaults.kafkaTopic, defaults.kafkaClientId, defaults.kafkaSaslMechanism, defaults.kafkaTls, defaults.kafkaTlsCaFile, defaults.kafkaOrdering]).toEqual([
      undefined, 'sandbox.events', 'boxrelay', undefined, false, undefined, 'none',
    ]);
    const config = loadConfig({
      env: {
        BOXRELAY_KAFKA_BROKERS: 'kafka-0:9092, kafka-1:9093,[::1]:9094',
        BOXRELAY_KAFKA_TOPIC: 'box.lifecycle',
        BOXRELAY_KAFKA_CLIENT_ID: 'relay-eu',
        BOXRELAY_KAFKA_SASL_MECHANISM: 'scram-sha-512',
        BOXRELAY_KAFKA_SASL_USERNAME: 'relay',
        BOXRELAY_KAFKA_SASL_PASSWORD: 'pw',
        BOXRELAY_KAFKA_TLS: 'true',
        BOXRELAY_KAFKA_TLS_CA_FILE: '/ca.pem',
        BOXRELAY_KAFKA_ORDERING: 'per-box',
      },
      readFile: () => '-----BEGIN CERTIFICATE-----\n...\n-----END CERTIFICATE-----\n',
    });
    expect(config).toMatchObject({
      kafkaBrokers: ['kafka-0:9092', 'kafka-1:9093', '[::1]:9094'], kafkaTopic: 'box.lifecycle', kafkaClientId: 'relay-eu',
      kafkaSaslMechanism: 'scram-sha-512', kafkaSaslUsername: 'relay', kafkaSaslPassword: 'pw', kafkaTls: true, kafkaTlsCaFile: '/ca.pem', kafkaOrdering: 'per-box',
    });
  });

  it('refuses bad values with one line each, naming the variable', () => {
    const problems = (env: Record<string, string>, readFile?: (path: string) => string): string[] => {
      try {
        loadConfig({ env, ...(readFile ? { readFile } : {}) });
      } catch (error) {
        return (error as ConfigError).problems;
      }
      return [];
    };
    const bad = problems({
      BOXRELAY_KAFKA_BROKERS: 'kafka-0',
      BOXRELAY_KAFKA_TOPIC: 'a/b',
      BOXRELAY_KAFKA_SASL_MECHANISM: 'gssapi',
      BOXRELAY_KAFKA_TLS: 'yes',
      BOXRELAY_KAFKA_ORDERING: 'fifo',
    });
    expect(bad.map((line) => line.split(':')[0])).toEqual([
      'BOXRELAY_KAFKA_BROKERS', 'BOXRELAY_KAFKA_TOPIC', 'BOXRELAY_KAFKA_SASL_MECHANISM', 'BOXRELAY_KAFKA_TLS', 'BOXRELAY_KAFKA_ORDERING',
    ]);
    expect(problems({ BOXRELAY_KAFKA_BROKERS: 'k:9092', BOXRELAY_KAFKA_SASL_USERNAME: 'relay' })).toEqual([
      'BOXRELAY_KAFKA_SASL_MECHANISM, BOXRELAY_KAFKA_SASL_USERNAME and BOXRELAY_KAFKA_SASL_PASSWORD go together',
    ]);
    expect(problems({ BOXRELAY_KAFKA_TLS_CA_FILE: '/ca.pem' })).toEqual(['BOXRELAY_KAFKA_TLS_CA_FILE: needs BOXRELAY_KAFKA_TLS=true']);
    expect(problems({ BOXRELAY_KAFKA_TLS: 'true', BOXRELAY_KAFKA_TLS_CA_FILE: '/ca.pem' }, () => 'not a certificate')).toEqual([
      'BOXRELAY_KAFKA_TLS_CA_FILE (/ca.pem): not a PEM certificate',
    ]);
  });

  it('`boxrelay serve` exits 2 naming the variable, and never prints the SASL password', async () => {
    const result = await runCli(['serve'], {
      BOXRELAY_SECRETS: SECRET,
      BOXRELAY_KAFKA_BROKERS: 'kafka-0:port',
      BOXRELAY_KAFKA_SASL_PASSWORD: 'hunter2-kafka',
    });
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(/^boxrelay: invalid configuration: BOXRELAY_KAFKA_BROKERS: expected comma-separated host:port bootstrap brokers/);
    expect(result.stderr + result.stdout).not.toContain('hunter2-kafka');
  });
});
