import { Webhook } from 'standardwebhooks';
import request from 'supertest';
import { describe, expect, it } from 'vitest';
import { ManualClock } from './support/clock.js';
import { adminAuth, advanceAndWake, allDelivered, fanoutFixture, fastTuning, hook, metricValue, outboxRows } from './support/fanout-relay.js';
import { waitFor } from './support/fanout.js';
import { testRelay, type TestRelay } from './support/relay.js';

const HOOK_SECRET = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';

describe('outgoing HTTP hooks', () => {
  const { server, relay } = fanoutFixture();
  const deliveries = (t: TestRelay, sink: string, outcome: string) =>
    metricValue(t.registry, 'boxrelay_sink_deliveries_total', { sink, outcome });

  it('retries 500, 500 in process and delivers once on 200, recording the attempts', async () => {
    const target = await server((_req, i) => (i < 2 ? 500 : 200));
    const t = await relay({ hooks: [hook('ops', target.url)] });
    const posted = await t.post({ type: 'box.error' });
    expect(posted.status).toBe(200);

    const requests = await target.received(3);
    expect(requests.map((r) => r.headers['webhook-id'])).toEqual([posted.deliveryId, posted.deliveryId, posted.deliveryId]);
    await allDelivered(t, 'ops');
    expect(target.requests).toHaveLength(3);
    expect(await deliveries(t, 'ops', 'retried')).toBe(2);
    expect(await deliveries(t, 'ops', 'delivered')).toBe(1);
    expect(await deliveries(t, 'ops', 'dead_lettered')).toBe(0);
  });

  it('sends a 400 straight to the dead letters, and so the last of maxAttempts failures', async () => {
    const refusing = await server(() => 400);
    const failing = await server(() => 503);
    const t = await relay({ hooks: [hook('strict', refusing.url), hook('flaky', failing.url, { maxAttempts: 5 })] });
    await t.post();

    await waitFor(async () => (await outboxRows(t, 'strict'))[0]?.status === 'dead', 'the 400 to be a dead letter');
    const [strict] = await outboxRows(t, 'strict');
    expect(strict).toMatchObject({ attempts: 1, last_error: 'http_400: hook answered 400', updated_at: t.clock.now() });
    expect(refusing.requests).toHaveLength(1);

    // 3 attempts in process, then one per scheduled retry (due at once here) up to maxAttempts.
    await waitFor(async () => (await outboxRows(t, 'flaky'))[0]?.status === 'dead', 'maxAttempts to run out');
    expect((await outboxRows(t, 'flaky'))[0]).toMatchObject({ attempts: 5, last_error: 'http_503: hook answered 503' });
    expect(failing.requests).toHaveLength(5);
    expect(await deliveries(t, 'strict', 'dead_lettered')).toBe(1);
    expect(await deliveries(t, 'strict', 'retried')).toBe(0);
    expect(await deliveries(t, 'flaky', 'retried')).toBe(4);
    expect(await deliveries(t, 'flaky', 'dead_lettered')).toBe(1);

    const dead = await request(t.relay.internalApp).get('/admin/dead-letters').set(adminAuth);
    expect(dead.body.deadLetters.map((d: { sink: string }) => d.sink).sort()).toEqual(['flaky', 'strict']);
    expect(await metricValue(t.registry, 'boxrelay_dead_letters', { sink: 'flaky' })).toBe(1);
    expect(await metricValue(t.registry, 'boxrelay_outbox_pending', { sink: 'flaky' })).toBe(0);
  });

  it('waits at least Retry-After: in process when short, in the database when longer', async () => {
    const inProcess = await server((_req, i) => (i === 0 ? { status: 429, headers: { 'Retry-After': '1' } } : 200));
    const t = await relay({ hooks: [hook('quick', inProcess.url)] });
    await t.post();
    const [first, second] = await inProcess.received(2);
    expect(second!.at - first!.at).toBeGreaterThanOrEqual(1000);

    const scheduled = await server((_req, i) => (i === 0 ? { status: 503, headers: { 'Retry-After': '120' } } : 200));
    const s = await relay({ hooks: [hook('later', scheduled.url)] }, { dispatch: { ...fastTuning, quickMaxDelayMs: 1000 } });
    await s.post();
    await waitFor(async () => (await outboxRows(s, 'later'))[0]?.attempts === 1, 'the first attempt to be recorded');
    const [row] = await outboxRows(s, 'later');
    expect(row).toMatchObject({ status: 'pending', next_attempt_at: s.clock.now() + 120_000, last_error: 'http_503: hook answered 503' });
    expect(await deliveries(s, 'later', 'retried')).toBe(1);

    advanceAndWake(s, 120_000);
    await scheduled.received(2);
    await allDelivered(s, 'later');
    expect(scheduled.requests).toHaveLength(2);
  });

  it('under a short configured lease, retries in process only what fits in it; a longer wait moves to the database', async () => {
    const target = await server((_req, i) => (i === 0 ? 500 : i === 1 ? { status: 429, headers: { 'Retry-After': '3' } } : 200));
    // Attempts of a claim may run for half of the 4 s lease: a quick retry fits, a 3 s Retry-After does not.
    const t = await relay({ outboxLeaseMs: 4000, hooks: [hook('short', target.url, { timeoutMs: 200 })] });
    await t.post();
    await waitFor(async () => (await outboxRows(t, 'short'))[0]?.attempts === 2, 'two attempts to be recorded');
    expect((await outboxRows(t, 'short'))[0]).toMatchObject({ status: 'pending', next_attempt_at: t.clock.now() + 3000, lease_owner: null });
    expect(target.requests).toHaveLength(2);
    const scheduled = () => t.logs.entries().filter((e) => e.msg === 'delivery failed; retry scheduled').map((e) => e.error);
    expect(scheduled()).toEqual(['http_429: hook answered 429']);

    advanceAndWake(t, 3000);
    await target.received(3);
    await allDelivered(t, 'short');
    expect(target.requests).toHaveLength(3);
  });

  it('caps a Retry-After at one hour, and the capped attempt counts toward maxAttempts', async () => {
    const target = await server(() => ({ status: 503, headers: { 'Retry-After': '31536000' } }));
    // pauseAfter 0: failing for the hour would otherwise pause the hook, which keeps its work instead.
    const t = await relay({ hooks: [hook('slow', target.url, { maxAttempts: 2, pauseAfter: 0 })] });
    await t.post();
    await waitFor(async () => (await outboxRows(t, 'slow'))[0]?.attempts === 1, 'the first attempt to be recorded');
    expect((await outboxRows(t, 'slow'))[0]).toMatchObject({ status: 'pending', next_attempt_at: t.clock.now() + 3_600_000 });

    advanceAndWake(t, 3_600_000);
    await waitFor(async () => (await outboxRows(t, 'slow'))[0]?.status === 'dead', 'the second attempt to use up maxAttempts');
    expect((await outboxRows(t, 'slow'))[0]).toMatchObject({ attempts: 2, last_error: 'http_503: hook answered 503' });
    expect(target.requests).toHaveLength(2);
  });

  it('signs as Standard Webhooks, verified by the standardwebhooks library', async () => {
    const target = await server();
    const t = await relay(
      { hooks: [hook('signed', target.url, { secret: HOOK_SECRET, headers: { Authorization: 'Bearer xyz', 'webhook-id': 'forged' } })] },
      { clock: new ManualClock(Date.now()) },
    );
    const posted = await t.post({ type: 'box.error', boxId: 'bx_sig' });
    const [req] = await target.received(1);
    expect(req!.headers['content-type']).toBe('application/cloudevents+json');
    expect(req!.headers.authorization).toBe('Bearer xyz');
    expect(req!.headers['webhook-id']).toBe(posted.deliveryId);
    const verified = new Webhook(HOOK_SECRET).verify(req!.body, req!.headers as Record<string, string>) as Record<string, unknown>;
    expect(verified).toMatchObject({ specversion: '1.0', id: posted.deliveryId, type: 'box.error', subject: 'bx_sig', source: 'sandbox', boxrelayaccount: 'default' });
    expect(() => new Webhook('whsec_' + Buffer.from('another key').toString('base64')).verify(req!.body, req!.headers as Record<string, string>)).toThrow();
    expect(t.logs.text()).not.toContain(HOOK_SECRET);
  });

  it('formats slack text with the box name and id escaped', async () => {
    const target = await server();
    const t = await relay({ hooks: [hook('chat', target.url, { format: 'slack' })] });
    await t.post({ type: 'box.error', boxId: 'bx_<!here>', boxName: 'ci & <@U1>', previousState: 'running', createdAt: '2026-11-21T10:00:00.123Z' });
    const [req] = await target.received(1);
    expect(req!.headers['content-type']).toBe('application/json');
    expect(req!.headers['webhook-signature']).toBeUndefined();
    expect(JSON.parse(req!.body)).toEqual({
      text: 'box ci &amp; &lt;@U1&gt; (bx_&lt;!here&gt;) entered error from running at 2026-11-21T10:00:00.123Z',
    });
  });

  it('delivers only the event types of a hook filter', async () => {
    const errors = await server();
    const everything = await server();
    const t = await relay({ hooks: [hook('errors', errors.url, { events: ['box.error'] }), hook('all', everything.url)] });
    for (const type of ['box.ready', 'box.error', 'box.archived', 'box.hydrated', 'box.error']) await t.post({ type });
    await everything.received(5);
    await allDelivered(t, 'all');
    await allDelivered(t, 'errors');
    expect(errors.requests.map((r) => JSON.parse(r.body).type)).toEqual(['box.error', 'box.error']);
    expect(await metricValue(t.registry, 'boxrelay_sink_deliveries_total', { sink: 'errors', outcome: 'delivered' })).toBe(2);
  });

  it('sets aside the pending work of a hook removed from the config as dead letters', async () => {
    const t = await testRelay({ hooks: [hook('old', 'http://127.0.0.1:9/never')] });
    await t.post();
    await t.post();
    await t.close();

    const target = await server();
    const again = await relay({ database: t.config.database, hooks: [hook('new', target.url)] });
    const dead = await request(again.relay.internalApp).get('/admin/dead-letters?sink=old').set(adminAuth);
    expect(dead.body.deadLetters).toHaveLength(2);
    expect(dead.body.deadLetters[0]).toMatchObject({ sink: 'old', lastError: 'sink not configured', attempts: 0 });
    expect(await metricValue(again.registry, 'boxrelay_outbox_pending', { sink: 'old' })).toBe(0);
    expect(await metricValue(again.registry, 'boxrelay_dead_letters', { sink: 'old' })).toBe(2);
    // The log says how to undo it, for a replica that started with an older config than its peers.
    const logged = again.logs.entries().filter((e) => e.sink === 'old' && e.rows === 2);
    expect(logged).toHaveLength(1);
    expect(logged[0]).toMatchObject({ level: 40 });
    expect(logged[0]!.msg).toContain('boxrelay dead-letters retry --all --sink old');

    const retry = await request(again.relay.internalApp)
      .post(`/admin/dead-letters/${dead.body.deadLetters[0].id}/retry`)
      .set(adminAuth);
    expect(retry.status).toBe(400);
    expect(retry.body.code).toBe('invalid_request');
  });

  it('counts a hook that does not answer in time as a retryable timeout', async () => {
    const silent = await server(() => 'hang');
    const t = await relay({ hooks: [hook('slow', silent.url, { timeoutMs: 100, maxAttempts: 2 })] });
    await t.post();
    await waitFor(async () => (await outboxRows(t, 'slow'))[0]?.status === 'dead', 'the timeouts to run out');
    expect((await outboxRows(t, 'slow'))[0]).toMatchObject({ attempts: 2, last_error: 'timeout: no answer within 100 ms' });
    expect(await metricValue(t.registry, 'boxrelay_sink_up', { sink: 'slow' })).toBe(0);
  });
});
