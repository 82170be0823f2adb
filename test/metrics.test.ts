import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import BetterSqlite3 from 'better-sqlite3';
import request from 'supertest';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { BOX_EVENT_TYPES } from '../src/events/types.js';
import { BOX_STATES, SINK_OUTCOMES, UNKNOWN_ACCOUNT_LABEL, WEBHOOK_OUTCOMES } from '../src/metrics/metrics.js';
import { sqliteFile } from './support/databases.js';
import { parseExposition, seriesOf, valueOf, type Exposition } from './support/prometheus.js';
import { testRelay, type TestRelay } from './support/relay.js';
import { delivery, sendRaw, type Delivery, type DeliveryOptions } from './support/sign.js';
import { Registry } from 'prom-client';
import { createMetrics } from '../src/metrics/metrics.js';

const FILE_SECRET = 'whsec_ZmlsZS1zZWNyZXQtMDEyMzQ1Njc4OWFiY2RlZg==';
const FILE_SECRET_EXPIRY = '2026-11-22T10:00:00Z';
const MAX_BODY = 4096;

/** Every metric of contract section 6, with its Prometheus type. */
const CONTRACT_METRICS = {
  boxrelay_webhook_requests_total: 'counter',
  boxrelay_events_total: 'counter',
  boxrelay_signature_secret_matches_total: 'counter',
  boxrelay_sink_deliveries_total: 'counter',
  boxrelay_sink_delivery_duration_seconds: 'histogram',
  boxrelay_outbox_pending: 'gauge',
  boxrelay_dead_letters: 'gauge',
  boxrelay_event_delay_seconds: 'histogram',
  boxrelay_boxes: 'gauge',
  boxrelay_sink_up: 'gauge',
  boxrelay_secrets_valid: 'gauge',
  boxrelay_secret_expiry_timestamp_seconds: 'gauge',
  boxrelay_ready: 'gauge',
} as const;

let t: TestRelay;

beforeEach(async () => {
  // The secrets file sits beside the database file, in the test's own temporary folder.
  const database = sqliteFile();
  const secretsFile = join(dirname(database), 'secrets.txt');
  writeFileSync(secretsFile, `# rotated in by hand\n${FILE_SECRET} ${FILE_SECRET_EXPIRY}\n`);
  t = await testRelay({
    database,
    secretsFile,
    maxBodyBytes: MAX_BODY,
    busyTimeoutMs: 1,
    hooks: [{ name: 'alerts', url: 'http://127.0.0.1:9/hook' }],
  });
});

afterEach(async () => {
  await t.close();
});

async function scrape(): Promise<Exposition> {
  const response = await request(t.relay.internalApp).get('/metrics').expect(200);
  expect(response.headers['content-type']).toMatch(/^text\/plain; version=0\.0\.4/);
  return parseExposition(response.text);
}

const send = (d: Delivery) =>
  sendRaw(request(t.relay.publicApp).post('/webhooks').set(d.headers), d.body);
const signed = (options: Partial<DeliveryOptions> = {}) => delivery({ timestamp: t.clock.seconds, ...options });
const outcomes = (e: Exposition) =>
  Object.fromEntries(WEBHOOK_OUTCOMES.map((outcome) => [outcome, valueOf(e, 'boxrelay_webhook_requests_total', { account: 'default', outcome })]));

describe('/metrics on the internal port', () => {
  it('exposes every contract metric, counters at 0 for each known label value, and default process metrics', async () => {
    const e = await scrape();
    for (const [name, type] of Object.entries(CONTRACT_METRICS)) expect(e.types.get(name), name).toBe(type);
    for (const name of e.types.keys()) expect(e.help.get(name), `HELP of ${name}`).toBeTruthy();
    for (const outcome of WEBHOOK_OUTCOMES) expect(valueOf(e, 'boxrelay_webhook_requests_total', { account: 'default', outcome })).toBe(0);
    expect(valueOf(e, 'boxrelay_webhook_requests_total', { account: UNKNOWN_ACCOUNT_LABEL, outcome: 'not_found' })).toBe(0);
    for (const type of BOX_EVENT_TYPES) expect(valueOf(e, 'boxrelay_events_total', { account: 'default', type })).toBe(0);
    for (const slot of ['0', '1']) expect(valueOf(e, 'boxrelay_signature_secret_matches_total', { account: 'default', slot })).toBe(0);
    for (const state of BOX_STATES) expect(valueOf(e, 'boxrelay_boxes', { state })).toBe(0);
    // The sinks' own metrics are the fan-out's to move; here only their presence per configured sink.
    for (const outcome of SINK_OUTCOMES) {
      expect(valueOf(e, 'boxrelay_sink_deliveries_total', { sink: 'alerts', outcome })).toBe(0);
      expect(e.help.get('boxrelay_sink_deliveries_total'), `the HELP names ${outcome}`).toContain(outcome);
    }
    // Nothing received or tried yet: nothing pending, no dead letter, and the hook counts as up.
    const gauges = { boxrelay_outbox_pending: 0, boxrelay_dead_letters: 0, boxrelay_sink_up: 1 };
    for (const [name, value] of Object.entries(gauges)) expect(valueOf(e, name, { sink: 'alerts' }), name).toBe(value);
    expect(e.types.get('process_cpu_user_seconds_total')).toBe('counter');
    expect(e.types.get('nodejs_eventloop_lag_seconds')).toBe('gauge');
    expect(valueOf(e, 'boxrelay_ready')).toBe(1);
  });

  it('counts accepted, duplicate and every refusal code of the receiver table once each', async () => {
    const before = outcomes(await scrape());
    const first = signed();
    const tooLargeBody = JSON.stringify({ pad: 'x'.repeat(MAX_BODY) });
    const withoutSignature = signed();
    delete withoutSignature.headers['X-Service-Signature'];
    const twiceDelivered = signed();
    twiceDelivered.headers['X-Service-Delivery'] = [twiceDelivered.id, twiceDelivered.id] as unknown as string;
    const badTimestamp = signed();
    badTimestamp.headers['X-Service-Timestamp'] = '1e9';
    const mismatch = signed({ id: 'evt_header' });
    const mismatchBody = JSON.stringify({ id: 'evt_body', type: 'box.ready', createdAt: '2026-11-21T10:00:00Z', data: { box: { id: 'bx_1' } } });

    const cases: [Delivery, number][] = [
      [first, 200],
      [first, 200],
      [withoutSignature, 400],
      [twiceDelivered, 400],
      [badTimestamp, 400],
      [signed({ timestamp: t.clock.seconds - 301 }), 401],
      [signed({ body: tooLargeBody }), 413],
      [signed({ signature: 'v2=abc' }), 401],
      [signed({ signature: `v1=${'0'.repeat(64)}` }), 401],
      [signed({ body: '{"id":"x"}' }), 400],
      [delivery({ id: mismatch.id, timestamp: t.clock.seconds, body: mismatchBody }), 400],
    ];
    for (const [d, status] of cases) await send(d).expect(status);

    // Storage that cannot commit: another connection holds SQLite's write lock.
    const blocker = new BetterSqlite3(t.config.database);
    blocker.exec('BEGIN IMMEDIATE');
    try {
      const refused = await send(signed());
      expect(refused.status).toBe(503);
      expect(refused.body.code).toBe('storage_unavailable');
    } finally {
      blocker.exec('ROLLBACK');
      blocker.close();
    }

    const after = outcomes(await scrape());
    // internal_error (a fault of the relay itself) and not_found (an endpoint of no account) have their own tests.
    for (const outcome of WEBHOOK_OUTCOMES) {
      expect((after[outcome] ?? NaN) - (before[outcome] ?? NaN), outcome).toBe(outcome === 'internal_error' || outcome === 'not_found' ? 0 : 1);
    }
  });

  it('counts unique events by type, observes the delay from createdAt, and counts the matching secret slot', async () => {
    const createdAt = new Date(t.clock.now() - 5_000).toISOString();
    const ready = signed({ type: 'box.ready', createdAt });
    await send(ready).expect(200);
    await send(ready).expect(200); // duplicate: not an event
    await send(signed({ type: 'box.error', boxId: 'bx_2', createdAt, secret: FILE_SECRET })).expect(200);
    await send(signed({ type: 'sandbox.new-kind', body: undefined })).expect(200);

    const e = await scrape();
    expect(valueOf(e, 'boxrelay_events_total', { account: 'default', type: 'box.ready' })).toBe(1);
    expect(valueOf(e, 'boxrelay_events_total', { account: 'default', type: 'box.error' })).toBe(1);
    expect(valueOf(e, 'boxrelay_events_total', { account: 'default', type: 'box.archived' })).toBe(0);
    expect(valueOf(e, 'boxrelay_events_total', { account: 'default', type: 'sandbox.new-kind' })).toBe(1);
    // Slot 0 is BOXRELAY_SECRETS' secret (three requests, the duplicate included), slot 1 the file's.
    expect(valueOf(e, 'boxrelay_signature_secret_matches_total', { account: 'default', slot: '0' })).toBe(3);
    expect(valueOf(e, 'boxrelay_signature_secret_matches_total', { account: 'default', slot: '1' })).toBe(1);

    expect(valueOf(e, 'boxrelay_event_delay_seconds_count')).toBe(3);
    expect(valueOf(e, 'boxrelay_event_delay_seconds_sum')).toBeCloseTo(10, 6);
    expect(valueOf(e, 'boxrelay_event_delay_seconds_bucket', { le: '2.5' })).toBe(1);
    expect(valueOf(e, 'boxrelay_event_delay_seconds_bucket', { le: '5' })).toBe(3);
    expect(valueOf(e, 'boxrelay_event_delay_seconds_bucket', { le: '+Inf' })).toBe(3);
  });

  it('gauges the secrets: how many are valid and when the expiring one ends, until it has', async () => {
    let e = await scrape();
    expect(valueOf(e, 'boxrelay_secrets_valid', { account: 'default' })).toBe(2);
    expect(seriesOf(e, 'boxrelay_secret_expiry_timestamp_seconds')).toEqual([
      { name: 'boxrelay_secret_expiry_timestamp_seconds', labels: { account: 'default', slot: '1' }, value: Date.parse(FILE_SECRET_EXPIRY) / 1000 },
    ]);

    t.clock.set(Date.parse(FILE_SECRET_EXPIRY) + 1);
    e = await scrape();
    expect(valueOf(e, 'boxrelay_secrets_valid', { account: 'default' })).toBe(1);
    expect(seriesOf(e, 'boxrelay_secret_expiry_timestamp_seconds')).toEqual([]);
    expect((await send(signed({ secret: FILE_SECRET }))).body.code).toBe('invalid_signature');
  });

  it('gauges boxes by last known state with bounded label values (never box ids)', async () => {
    const at = (s: number) => new Date(t.clock.now() - s * 1000).toISOString();
    await send(signed({ boxId: 'bx_1', type: 'box.ready', createdAt: at(30) })).expect(200);
    await send(signed({ boxId: 'bx_2', type: 'box.ready', createdAt: at(30) })).expect(200);
    await send(signed({ boxId: 'bx_3', type: 'box.error', createdAt: at(30) })).expect(200);
    let e = await scrape();
    expect(valueOf(e, 'boxrelay_boxes', { state: 'ready' })).toBe(2);
    expect(valueOf(e, 'boxrelay_boxes', { state: 'error' })).toBe(1);

    await send(signed({ boxId: 'bx_1', type: 'box.error', createdAt: at(10) })).expect(200);
    await send(signed({ boxId: 'bx_2', type: 'box.archived', createdAt: at(60) })).expect(200); // older: ignored
    await send(signed({ boxId: 'bx_4', type: 'box.hydrated', createdAt: at(5) })).expect(200); // no state yet
    await send(signed({ boxId: 'bx_5', type: 'box.ready', state: 'melting', createdAt: at(5) })).expect(200);
    e = await scrape();
    expect(valueOf(e, 'boxrelay_boxes', { state: 'ready' })).toBe(1);
    expect(valueOf(e, 'boxrelay_boxes', { state: 'error' })).toBe(2);
    expect(valueOf(e, 'boxrelay_boxes', { state: 'archived' })).toBe(0);
    expect(valueOf(e, 'boxrelay_boxes', { state: 'unknown' })).toBe(1);
    expect(valueOf(e, 'boxrelay_boxes', { state: 'other' })).toBe(1);
    const labels = seriesOf(e, 'boxrelay_boxes').map((s) => s.labels.state);
    expect(new Set(labels)).toEqual(new Set([...BOX_STATES, 'unknown', 'other']));
  });

  it('reports ready 0 while storage cannot commit, and 1 again after', async () => {
    const blocker = new BetterSqlite3(t.config.database);
    blocker.exec('BEGIN IMMEDIATE');
    try {
      t.clock.advance(5_000); // past the readiness cache
      expect(valueOf(await scrape(), 'boxrelay_ready')).toBe(0);
      await request(t.relay.internalApp).get('/readyz').expect(503);
    } finally {
      blocker.exec('ROLLBACK');
      blocker.close();
    }
    t.clock.advance(5_000);
    expect(valueOf(await scrape(), 'boxrelay_ready')).toBe(1);
  });

  it('still answers the scrape when the database cannot be read, keeping the last box counts', async () => {
    await send(signed({ boxId: 'bx_1', type: 'box.error' })).expect(200);
    expect(valueOf(await scrape(), 'boxrelay_boxes', { state: 'error' })).toBe(1);
    const database = t.relay.store.database;
    if (database.dialect !== 'sqlite') throw new Error('this test closes the SQLite connection');
    database.sqlite.close();
    t.clock.advance(5_000);
    const e = await scrape();
    expect(valueOf(e, 'boxrelay_ready')).toBe(0);
    expect(valueOf(e, 'boxrelay_boxes', { state: 'error' })).toBe(1);
  });

  it('passes `promtool check metrics` on a real scrape of the internal port', async () => {
    await send(signed({ createdAt: new Date(t.clock.now() - 1000).toISOString() })).expect(200);
    const { internalPort } = await t.relay.start();
    const response = await fetch(`http://127.0.0.1:${internalPort}/metrics`);
    expect(response.status).toBe(200);
    const text = await response.text();
    parseExposition(text);

    const findings = await new Promise<string>((resolve, reject) => {
      const child = spawn('/usr/bin/promtool', ['check', 'metrics'], { stdio: ['pipe', 'pipe', 'pipe'] });
      let output = '';
      child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
      child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
      child.on('error', reject); // promtool missing: the test fails
      child.on('close', () => resolve(output));
      child.stdin.end(text);
    });
    // prom-client's default nodejs_* / process_* metrics are not ours to rename.
    const ours = findings.split('\n').filter((line) => line.trim() !== '' && !/^\s*(nodejs_|process_)/.test(line));
    expect(ours).toEqual([]);
  });
});

describe('metrics that follow changes', () => {
  it('drops a by-sink gauge series when its sink leaves the counts, and keeps configured sinks at 0', async () => {
    const registry = new Registry();
    let dead: Record<string, number> = { gone: 3 };
    createMetrics(registry, { sinks: ['nats'], sources: { deadLettersBySink: async () => dead } });
    expect(await registry.getSingleMetricAsString('boxrelay_dead_letters')).toContain('boxrelay_dead_letters{sink="gone"} 3');
    dead = {};
    const after = await registry.getSingleMetricAsString('boxrelay_dead_letters');
    expect(after).not.toContain('sink="gone"');
    expect(after).toContain('boxrelay_dead_letters{sink="nats"} 0');
  });

  it('starts boxrelay_signature_secret_matches_total at 0 for a secret slot that appears later', async () => {
    const registry = new Registry();
    let accepted = [{ slot: 0 }];
    createMetrics(registry, { sinks: [], sources: { secrets: () => ({ default: accepted }) } });
    await registry.metrics();
    accepted = [{ slot: 0 }, { slot: 1 }];
    await registry.metrics();
    expect(await registry.getSingleMetricAsString('boxrelay_signature_secret_matches_total')).toContain(
      'boxrelay_signature_secret_matches_total{account="default",slot="1"} 0',
    );
  });
});
