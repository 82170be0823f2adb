import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import request from 'supertest';
import { beforeAll, describe, expect, it } from 'vitest';
import { DAY_MS } from '../src/clock.js';
import type { Attempt } from '../src/store/attempts/attempt-rows.js';
import { pruneExpired } from '../src/store/retention/prune.js';
import { engines } from './support/databases.js';
import { waitFor } from './support/fanout.js';
import { adminAuth, allDelivered, fanoutFixture, hook, outboxRows } from './support/fanout-relay.js';
import { ownNats, uniqueNames } from './support/nats.js';
import { requireBuild, runCli } from './support/process.js';
import type { HookAnswer } from './support/hook-server.js';
import type { TestRelay } from './support/relay.js';

const { server, relay, defer } = fanoutFixture();

const get = (t: TestRelay, path: string) => request(t.relay.internalApp).get(path).set(adminAuth);
const post = (t: TestRelay, path: string, body: object) => request(t.relay.internalApp).post(path).set(adminAuth).send(body);

async function attemptsOf(t: TestRelay, eventId: string, query = ''): Promise<Attempt[]> {
  const response = await get(t, `/admin/events/${eventId}/attempts${query}`);
  expect(response.status, response.text).toBe(200);
  return response.body.attempts as Attempt[];
}

/** Waits for `count` attempts of an event (successes are written in batches, just after). */
const attemptsCount = (t: TestRelay, eventId: string, count: number, query = '') =>
  waitFor(async () => {
    const found = await attemptsOf(t, eventId, query);
    return found.length === count ? found : undefined;
  }, `${count} attempts of ${eventId}`);

const SIGNING = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
const PROD = 'whsec_cHJvZC1yZXNlbmQtc2VjcmV0LTAxMjM0NTY3ODk=';

describe.each(engines)('delivery attempts on $name', ({ url }) => {
  it('records each attempt of a hook: status, error, the request (redacted, unsigned) and the answer, newest first', async () => {
    const receiver = await server((_request, index): HookAnswer =>
      index === 0 ? { status: 503, headers: { 'content-type': 'text/plain', 'x-why': 'busy' } } : { status: 200, headers: { 'x-ok': '1' } },
    );
    const t = await relay({
      database: await url(),
      hooks: [hook('alerts', receiver.url, { headers: { Authorization: 'Bearer s3cret' }, secret: SIGNING })],
    });
    const { deliveryId } = await t.post();
    await receiver.received(2);
    const [second, first] = (await attemptsCount(t, deliveryId, 2)) as [Attempt, Attempt];
    expect(first).toMatchObject({ sink: 'alerts', n: 1, outcome: 'retried', status: 503, error: { code: 'http_503', message: 'hook answered 503' } });
    expect(first.response).toEqual({ headers: expect.objectContaining({ 'x-why': 'busy' }), body: '', bodyTruncated: false });
    expect(first.request?.url).toBe(receiver.url);
    expect(first.request?.headers).toMatchObject({ authorization: '[redacted]', 'webhook-id': deliveryId });
    expect(first.request?.headers).not.toHaveProperty('webhook-signature');
    expect(second).toMatchObject({ sink: 'alerts', n: 2, outcome: 'delivered', status: 200, error: null });
    expect(second.response?.headers['x-ok']).toBe('1');
    expect(typeof second.durationMs).toBe('number');
    expect(new Date(second.at).toISOString()).toBe(second.at);
    expect(JSON.stringify(await attemptsOf(t, deliveryId))).not.toContain('s3cret');

    // Paged, newest first; filtered by sink.
    const page = await get(t, `/admin/events/${deliveryId}/attempts?limit=1`);
    expect(page.body.attempts.map((a: Attempt) => a.n)).toEqual([2]);
    const next = await get(t, `/admin/events/${deliveryId}/attempts?limit=1&cursor=${page.body.nextCursor as string}`);
    expect([next.body.attempts.map((a: Attempt) => a.n), next.body.nextCursor]).toEqual([[1], null]);
    expect(await attemptsOf(t, deliveryId, '?sink=other')).toEqual([]);

    const unknown = await get(t, '/admin/events/evt_nope/attempts');
    expect([unknown.status, unknown.body.ok, unknown.body.code]).toEqual([404, false, 'not_found']);
  });

  it('a refused event is dead-lettered; a timeout has no response', async () => {
    const picky = await server(() => ({ status: 422, headers: { 'content-type': 'text/html' } }));
    const slow = await server(() => 'hang');
    const t = await relay({ database: await url(), hooks: [hook('picky', picky.url), hook('slow', slow.url, { timeoutMs: 200, maxAttempts: 1 })] });
    const { deliveryId } = await t.post();
    await waitFor(async () => (await outboxRows(t, 'slow')).some((row) => row.status === 'dead') && (await outboxRows(t, 'picky')).length === 1, 'dead letters');
    const [refused] = await attemptsOf(t, deliveryId, '?sink=picky');
    expect(refused).toMatchObject({ n: 1, outcome: 'dead_lettered', status: 422, error: { code: 'http_422' } });
    const [timedOut] = await attemptsOf(t, deliveryId, '?sink=slow');
    expect(timedOut).toMatchObject({ n: 1, outcome: 'dead_lettered', status: null, error: { code: 'timeout' }, response: null });
    expect(timedOut?.request?.url).toBe(slow.url);
  });

  it('resends a delivered event with a fresh budget, n going on, audited; a sink it was not routed to is then listed', async () => {
    const receiver = await server();
    const other = await server();
    const t = await relay({
      database: await url(),
      hooks: [hook('alerts', receiver.url), hook('errors-only', other.url, { events: ['box.error'] })],
    });
    const { deliveryId } = await t.post();
    await receiver.received(1);
    await attemptsCount(t, deliveryId, 1);
    await allDelivered(t, 'alerts');

    const resent = await post(t, `/admin/events/${deliveryId}/resend`, { sink: 'alerts' });
    expect([resent.status, resent.body]).toEqual([202, { ok: true, queued: 1 }]);
    await receiver.received(2);
    expect(receiver.requests[1]?.headers['webhook-id']).toBe(deliveryId);
    const attempts = await attemptsCount(t, deliveryId, 2);
    expect(attempts.map((a) => [a.n, a.outcome])).toEqual([
      [2, 'delivered'],
      [1, 'delivered'],
    ]);

    expect((await post(t, `/admin/events/${deliveryId}/resend`, { sink: 'errors-only' })).status).toBe(202);
    await other.received(1);
    await waitFor(async () => {
      const deliveries = (await get(t, `/admin/events/${deliveryId}`)).body.deliveries as { sink: string; status: string }[];
      return deliveries.find((d) => d.sink === 'errors-only')?.status === 'delivered';
    }, 'errors-only listed as delivered');

    const audit = (await get(t, '/admin/audit?action=resend')).body.audit as { action: string; target: string; detail: unknown }[];
    expect(audit.map(({ action, target, detail }) => ({ action, target, detail }))).toEqual([
      { action: 'resend', target: deliveryId, detail: { sink: 'errors-only' } },
      { action: 'resend', target: deliveryId, detail: { sink: 'alerts' } },
    ]);

    // Refused: an unknown event or sink (404), no sink (400); none recorded, nothing sent.
    const noEvent = await post(t, '/admin/events/evt_nope/resend', { sink: 'alerts' });
    expect([noEvent.status, noEvent.body.code]).toEqual([404, 'not_found']);
    const noSink = await post(t, `/admin/events/${deliveryId}/resend`, { sink: 'nope' });
    expect([noSink.status, noSink.body.code]).toEqual([404, 'not_found']);
    const noBody = await post(t, `/admin/events/${deliveryId}/resend`, {});
    expect([noBody.status, noBody.body.code]).toEqual([400, 'invalid_request']);
    expect((await get(t, '/admin/audit?action=resend')).body.audit).toHaveLength(2);
    expect(await outboxRows(t, 'alerts')).toEqual([]);
  });

  it("answers a sink's health over a window: counts, rate, latency, statuses, last success and failure", async () => {
    const receiver = await server((_request, index) => (index === 0 ? 500 : index === 1 ? 200 : 422));
    const t = await relay({ database: await url(), hooks: [hook('alerts', receiver.url)] });
    const first = await t.post();
    await receiver.received(2);
    await attemptsCount(t, first.deliveryId, 2);
    const second = await t.post();
    await receiver.received(3);
    await attemptsCount(t, second.deliveryId, 1);

    const response = await get(t, '/admin/sinks/alerts/health');
    expect(response.status).toBe(200);
    const { health } = response.body;
    const at = new Date(t.clock.now()).toISOString();
    expect(health).toMatchObject({
      sink: 'alerts',
      window: '1h',
      attempts: 3,
      delivered: 1,
      failed: 2,
      statuses: { '200': 1, '422': 1, '500': 1 },
      lastSuccessAt: at,
      lastFailureAt: at,
      lastError: 'http_422: hook answered 422',
    });
    expect(health.successRate).toBeCloseTo(1 / 3);
    expect(health.latencyMs.p50).toBeGreaterThanOrEqual(0);
    expect(health.latencyMs.p99).toBeGreaterThanOrEqual(health.latencyMs.p50);

    // Exact over the window: an hour later the 1h window is empty, the 24h one is not.
    t.clock.advance(DAY_MS / 24 + 1);
    expect((await get(t, '/admin/sinks/alerts/health?window=1h')).body.health).toMatchObject({ attempts: 0, successRate: null, latencyMs: null, statuses: {} });
    expect((await get(t, '/admin/sinks/alerts/health?window=24h')).body.health).toMatchObject({ window: '24h', attempts: 3 });

    // The console's sink page: its failed attempts, newest first, and its attempts per minute by outcome.
    const failed = (await get(t, '/admin/sinks/alerts/failed-attempts')).body;
    expect(failed.attempts.map((a: Attempt & { eventId: string }) => [a.eventId, a.n, a.outcome])).toEqual([
      [second.deliveryId, 1, 'dead_lettered'],
      [first.deliveryId, 1, 'retried'],
    ]);
    const { minutes } = (await get(t, '/admin/sinks/alerts/attempts-per-minute?window=24h')).body as { minutes: { start: string; delivered: number; retried: number; dead_lettered: number }[] };
    expect(minutes.length).toBeGreaterThanOrEqual(24 * 60);
    const busy = minutes.filter((m) => m.delivered + m.retried + m.dead_lettered > 0);
    expect(busy).toEqual([{ start: new Date(Math.floor((t.clock.now() - DAY_MS / 24 - 1) / 60_000) * 60_000).toISOString(), delivered: 1, retried: 1, dead_lettered: 1 }]);

    const badWindow = await get(t, '/admin/sinks/alerts/health?window=2h');
    expect([badWindow.status, badWindow.body.ok, badWindow.body.code, typeof badWindow.body.message]).toEqual([400, false, 'invalid_request', 'string']);
    const unknown = await get(t, '/admin/sinks/nope/health');
    expect([unknown.status, unknown.body.code]).toEqual([404, 'not_found']);
  });

  it("records a bus's attempts with no request or response, and the broker's refusal", async () => {
    const config = join(mkdtempSync(join(tmpdir(), 'boxrelay-nats-conf-')), 'nats.conf');
    writeFileSync(config, 'max_payload: 1024\n');
    const nats = await ownNats(['-c', config]);
    defer(() => nats.kill());
    const { prefix, stream } = uniqueNames();
    const t = await relay({ database: await url(), natsUrl: nats.url, natsSubjectPrefix: prefix, natsStream: stream });
    const sent = await t.post();
    // Larger than the server's max_payload: refused for good.
    const refused = await t.post({ boxName: 'n'.repeat(2000) });
    const [delivered] = await attemptsCount(t, sent.deliveryId, 1);
    expect(delivered).toEqual({ sink: 'nats', n: 1, at: expect.any(String), durationMs: expect.any(Number), outcome: 'delivered', status: null, error: null, request: null, response: null });
    const [dead] = await attemptsCount(t, refused.deliveryId, 1);
    expect(dead).toMatchObject({ sink: 'nats', n: 1, outcome: 'dead_lettered', status: null, error: { code: 'nats_payload_too_large' }, request: null, response: null });
    expect((await get(t, '/admin/sinks/nats/health')).body.health).toMatchObject({ attempts: 2, delivered: 1, failed: 1, statuses: { nats_payload_too_large: 1 } });
  });

  it('BOXRELAY_ATTEMPTS=failed keeps failures only, and health still counts every attempt', async () => {
    const receiver = await server((_request, index) => (index === 0 ? 503 : 200));
    const t = await relay({ database: await url(), hooks: [hook('alerts', receiver.url)], attempts: 'failed' });
    const { deliveryId } = await t.post();
    await receiver.received(2);
    await allDelivered(t, 'alerts');
    expect((await attemptsOf(t, deliveryId)).map((a) => [a.n, a.outcome])).toEqual([[1, 'retried']]);
    const { health } = (await get(t, '/admin/sinks/alerts/health')).body;
    expect(health).toMatchObject({ attempts: 2, delivered: 1, failed: 1, successRate: 0.5, statuses: { '200': 1, '503': 1 }, lastSuccessAt: expect.any(String) });
    expect(health.latencyMs.p99).toBeGreaterThanOrEqual(health.latencyMs.p50);
  });

  it('BOXRELAY_ATTEMPTS=off records none, and health still counts every attempt', async () => {
    const receiver = await server((_request, index) => (index === 0 ? 503 : 200));
    const t = await relay({ database: await url(), hooks: [hook('alerts', receiver.url)], attempts: 'off' });
    const { deliveryId } = await t.post();
    await receiver.received(2);
    await allDelivered(t, 'alerts');
    expect(await attemptsOf(t, deliveryId)).toEqual([]);
    const { health } = (await get(t, '/admin/sinks/alerts/health')).body;
    const at = new Date(t.clock.now()).toISOString();
    expect(health).toMatchObject({ attempts: 2, delivered: 1, failed: 1, statuses: { '200': 1, '503': 1 }, lastSuccessAt: at, lastFailureAt: at, lastError: null });
    expect(health.latencyMs.p99).toBeGreaterThanOrEqual(health.latencyMs.p50);
    const { minutes } = (await get(t, '/admin/sinks/alerts/attempts-per-minute')).body as { minutes: { delivered: number; retried: number }[] };
    expect(minutes.filter((m) => m.delivered + m.retried > 0)).toMatchObject([{ delivered: 1, retried: 1 }]);
  });

  it('keeps the last 50 per event and sink, and prunes them with retention', async () => {
    const receiver = await server(() => 503);
    const t = await relay({ database: await url(), hooks: [hook('alerts', receiver.url, { maxAttempts: 53 })] });
    const { deliveryId } = await t.post();
    await receiver.received(53, 60_000);
    await waitFor(async () => (await outboxRows(t, 'alerts')).some((row) => row.status === 'dead'), 'a dead letter');
    const kept = await attemptsOf(t, deliveryId, '?limit=200');
    expect(kept.map((a) => a.n)).toEqual(Array.from({ length: 50 }, (_, i) => 53 - i));
    expect(kept[0]?.outcome).toBe('dead_lettered');
    const stored = await t.relay.store.database.kysely.selectFrom('attempts').select('n').execute();
    expect(stored).toHaveLength(50);
    // Health counts every attempt made, not only those kept.
    expect((await get(t, '/admin/sinks/alerts/health')).body.health).toMatchObject({ attempts: 53, failed: 53, statuses: { '503': 53 } });

    await pruneExpired(t.relay.store.database, { now: t.clock.now() + 31 * DAY_MS, retentionDays: 30 });
    expect(await t.relay.store.database.kysely.selectFrom('attempts').select('n').execute()).toEqual([]);
  });
});

describe.each(engines)('boxrelay events resend on $name', ({ url }) => {
  beforeAll(() => requireBuild());

  it('queues the event for the sink again, audited with `cli` as who asked; an unknown event or sink exits 1', async () => {
    const receiver = await server();
    const t = await relay({ database: await url(), hooks: [hook('alerts', receiver.url)] });
    const { deliveryId } = await t.post();
    await receiver.received(1);
    const hooksFile = join(mkdtempSync(join(tmpdir(), 'boxrelay-hooks-')), 'hooks.yaml');
    writeFileSync(hooksFile, `- name: alerts\n  url: ${receiver.url}\n`);
    const env = { BOXRELAY_DATABASE: t.config.database, BOXRELAY_HOOKS_FILE: hooksFile };
    const result = await runCli(['events', 'resend', deliveryId, '--sink', 'alerts'], env);
    expect(result.code, result.stderr).toBe(0);
    // The running relay takes the row up once due (the CLI dates it by the wall clock).
    t.clock.set(Date.now() + 1000);
    t.relay.fanout.wake();
    await receiver.received(2);
    expect(receiver.requests.map((r) => r.headers['webhook-id'])).toEqual([deliveryId, deliveryId]);
    expect((await runCli(['events', 'resend', 'evt_nope', '--sink', 'alerts'], env)).code).toBe(1);
    expect((await runCli(['events', 'resend', deliveryId, '--sink', 'nope'], env)).code).toBe(1);
    const audit = (await get(t, '/admin/audit?action=resend')).body.audit as { target: string; by: string; detail: unknown }[];
    expect(audit.map(({ target, by, detail }) => ({ target, by, detail }))).toEqual([{ target: deliveryId, by: 'cli', detail: { sink: 'alerts' } }]);
  });

  it('takes --account for the account the id is of, as the admin route takes account=: never another account’s stored key under default; an unknown account exits 2 with one line', async () => {
    const receiver = await server();
    const t = await relay({ database: await url(), accounts: [{ name: 'prod', secrets: [PROD] }], hooks: [hook('alerts', receiver.url)] });
    const { deliveryId } = await t.postTo('prod', PROD);
    await receiver.received(1);
    const dir = mkdtempSync(join(tmpdir(), 'boxrelay-accounts-'));
    writeFileSync(join(dir, 'hooks.yaml'), `- name: alerts\n  url: ${receiver.url}\n`);
    writeFileSync(join(dir, 'accounts.yaml'), `- {name: prod, secrets: [${PROD}]}\n`);
    const env = { BOXRELAY_DATABASE: t.config.database, BOXRELAY_HOOKS_FILE: join(dir, 'hooks.yaml'), BOXRELAY_ACCOUNTS_FILE: join(dir, 'accounts.yaml') };
    const resend = (...args: string[]) => runCli(['events', 'resend', ...args, '--sink', 'alerts'], env);

    // Under default (no --account): neither prod's upstream id nor its stored key reaches prod's event.
    for (const id of [deliveryId, `prod:${deliveryId}`]) expect(await resend(id)).toEqual({ code: 1, stdout: '', stderr: 'boxrelay: no such event\n' });
    expect(await resend(deliveryId, '--account', 'nope')).toEqual({ code: 2, stdout: '', stderr: 'boxrelay: --account: no account is named "nope" (accounts: default, prod)\n' });
    const result = await resend(deliveryId, '--account', 'prod');
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toBe(`queued ${deliveryId} for alerts\n`);
    t.clock.set(Date.now() + 1000);
    t.relay.fanout.wake();
    await receiver.received(2);
    expect(receiver.requests.map((r) => r.headers['webhook-id'])).toEqual([`prod:${deliveryId}`, `prod:${deliveryId}`]);
  });
});
