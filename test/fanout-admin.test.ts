import { writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import request from 'supertest';
import { beforeAll, describe, expect, it } from 'vitest';
import { createFanoutStore } from '../src/store/fanout-store.js';
import { requireBuild, runCli } from './support/process.js';
import { ManualClock } from './support/clock.js';
import { adminAuth, allDelivered, fanoutFixture, hook, metricValue, outboxRows, readWholeLog } from './support/fanout-relay.js';
import { waitFor, addRowsAsHolder } from './support/fanout.js';

const { server, relay } = fanoutFixture();

describe('admin API: dead letters and replay', () => {
  it('lists by page and sink, retries, discards and replays', async () => {
    // The hook refuses the first three requests (dead letters at once), then accepts.
    const picky = await server((_req, i) => (i < 3 ? 422 : 200));
    const good = await server();
    const t = await relay({ hooks: [hook('picky', picky.url), hook('good', good.url)] });
    const app = t.relay.internalApp;
    const posted = [];
    for (let i = 0; i < 3; i++) posted.push((await t.post({ boxId: `bx_${i}` })).deliveryId);
    await waitFor(async () => {
      const rows = await outboxRows(t, 'picky');
      return rows.length === 3 && rows.every((r) => r.status === 'dead');
    }, 'three dead letters');
    await good.received(3);

    expect((await request(app).get('/admin/dead-letters')).status).toBe(401);
    const first = await request(app).get('/admin/dead-letters?limit=2').set(adminAuth);
    expect(first.status).toBe(200);
    expect(first.body.deadLetters).toHaveLength(2);
    expect(first.body.deadLetters[0]).toEqual({
      id: expect.any(Number),
      eventId: posted[0],
      account: 'default',
      sink: 'picky',
      attempts: 1,
      lastError: 'http_422: hook answered 422',
      failedAt: new Date(t.clock.now()).toISOString(),
    });
    const second = await request(app).get(`/admin/dead-letters?limit=2&cursor=${first.body.nextCursor}`).set(adminAuth);
    expect(second.body.deadLetters.map((d: { eventId: string }) => d.eventId)).toEqual([posted[2]]);
    expect(second.body.nextCursor).toBeNull();
    expect((await request(app).get('/admin/dead-letters?sink=good').set(adminAuth)).body).toEqual({ ok: true, deadLetters: [], nextCursor: null });
    expect((await request(app).get('/admin/dead-letters?limit=0').set(adminAuth)).body.code).toBe('invalid_request');
    expect((await request(app).get('/admin/dead-letters?cursor=nope').set(adminAuth)).status).toBe(400);
    expect(await metricValue(t.registry, 'boxrelay_dead_letters', { sink: 'picky' })).toBe(3);
    expect(await metricValue(t.registry, 'boxrelay_sink_deliveries_total', { sink: 'picky', outcome: 'dead_lettered' })).toBe(3);

    const [one, two] = first.body.deadLetters as { id: number }[];
    const retried = await request(app).post(`/admin/dead-letters/${one!.id}/retry`).set(adminAuth);
    expect(retried.status).toBe(202);
    await picky.received(4);
    await waitFor(async () => !(await outboxRows(t, 'picky')).some((r) => r.id === one!.id), 'the retry delivered');
    expect((await request(app).post(`/admin/dead-letters/${one!.id}/retry`).set(adminAuth)).status).toBe(404);
    // An id that cannot be one is a malformed request, not a dead letter already gone.
    for (const [method, path] of [['post', '/admin/dead-letters/abc/retry'], ['post', '/admin/dead-letters/1.5/retry'], ['delete', '/admin/dead-letters/-1'], ['delete', '/admin/dead-letters/1234567890123456']] as const) {
      const refused = await request(app)[method](path).set(adminAuth);
      expect([refused.status, refused.body.code, refused.body.message], path).toEqual([400, 'invalid_request', 'a dead letter id is a whole number']);
    }

    expect((await request(app).delete(`/admin/dead-letters/${two!.id}`).set(adminAuth)).status).toBe(204);
    expect((await request(app).delete(`/admin/dead-letters/${two!.id}`).set(adminAuth)).status).toBe(404);
    expect(await metricValue(t.registry, 'boxrelay_dead_letters', { sink: 'picky' })).toBe(1);
    expect(await metricValue(t.registry, 'boxrelay_sink_deliveries_total', { sink: 'picky', outcome: 'delivered' })).toBe(1);

    const since = new Date(t.clock.now() - 60_000).toISOString();
    for (const bad of [{}, { since: 'yesterday' }, { since: '2026-02-30T10:00:00Z' }, { since, sink: 'nope' }, { since, extra: 1 }, { since: 5 }]) {
      const refused = await request(app).post('/admin/replay').set(adminAuth).send(bad);
      expect([refused.status, refused.body.code]).toEqual([400, 'invalid_request']);
    }
    const replay = await request(app).post('/admin/replay').set(adminAuth).send({ since, sink: 'good' });
    expect([replay.status, replay.body]).toEqual([202, { ok: true, queued: 3 }]);
    await good.received(6);
    expect(new Set(good.requests.slice(3).map((r) => r.headers['webhook-id']))).toEqual(new Set(posted));
    // Settled first: a replay adds no second row beside one still pending.
    await allDelivered(t, 'good');
    const everything = await request(app).post('/admin/replay').set(adminAuth).send({ since });
    expect(everything.body.queued).toBe(6);
    await good.received(9);
    await picky.received(7);
  });

  it('counts pending work and sink failures in the gauges and counters', async () => {
    const flaky = await server((_req, i) => (i === 0 ? 503 : 200));
    const t = await relay({ hooks: [hook('flaky', flaky.url)] }, { start: false });
    for (let i = 0; i < 4; i++) await t.post();
    expect(await metricValue(t.registry, 'boxrelay_outbox_pending', { sink: 'flaky' })).toBe(4);
    expect(await metricValue(t.registry, 'boxrelay_sink_deliveries_total', { sink: 'flaky', outcome: 'retried' })).toBe(0);
    await t.relay.start();
    await allDelivered(t, 'flaky');
    expect(await metricValue(t.registry, 'boxrelay_outbox_pending', { sink: 'flaky' })).toBe(0);
    expect(await metricValue(t.registry, 'boxrelay_sink_deliveries_total', { sink: 'flaky', outcome: 'retried' })).toBe(1);
    expect(await metricValue(t.registry, 'boxrelay_sink_deliveries_total', { sink: 'flaky', outcome: 'delivered' })).toBe(4);
    const text = await t.registry.metrics();
    expect(text).toMatch(/boxrelay_sink_delivery_duration_seconds_count\{sink="flaky"\} 5/);

    // Storage unreadable: the scrape still answers, with the last counts.
    await t.relay.fanout.stop(1000);
    const database = t.relay.store.database;
    if (database.dialect !== 'sqlite') throw new Error('this test closes the SQLite connection');
    await t.post();
    expect(await metricValue(t.registry, 'boxrelay_outbox_pending', { sink: 'flaky' })).toBe(1);
    database.sqlite.close();
    expect(await metricValue(t.registry, 'boxrelay_outbox_pending', { sink: 'flaky' })).toBe(1);
  });
});

// CLI processes and a relay process, one after another: past 30 s on a busy machine.
describe('CLI: dead-letters and replay on the database', { timeout: 90_000 }, () => {
  beforeAll(requireBuild);

  it('lists, retries, discards and replays without a server, and a running server picks the work up', async () => {
    const target = await server();
    // The CLI stamps its rows with the wall clock, so the relay's clock follows it (set after each command).
    const t = await relay({ hooks: [hook('alerts', target.url)] }, { start: false, clock: new ManualClock(Date.now()) });
    const since = new Date(t.clock.now() - 1000).toISOString();
    const posted: string[] = [];
    for (let i = 0; i < 4; i++) posted.push((await t.post({ boxId: `bx_${i}` })).deliveryId);
    // Make dead letters by hand, as a dispatcher that read the log leaves them: three for `alerts`, one for a sink no longer configured.
    const outbox = createFanoutStore(t.relay.store.database);
    await readWholeLog(t);
    await addRowsAsHolder(t.relay.store.database, outbox, 
      posted.map((deliveryId, i) => ({
        deliveryId,
        sink: i < 3 ? 'alerts' : 'gone',
        status: 'dead' as const,
        attempts: 8,
        nextAttemptAt: t.clock.now(),
        lastError: 'http_500: hook answered 500',
        boxId: `bx_${i}`,
        traceparent: null,
        now: t.clock.now(),
      })),
    );
    const rows = await outbox.exceptions.listDeadLetters({ limit: 10 });
    const ids = rows.map((r) => r.id);

    const hooksFile = join(dirname(t.config.database), 'hooks.yaml');
    writeFileSync(hooksFile, `- name: alerts\n  url: ${target.url}\n`);
    const env = { BOXRELAY_DATABASE: t.config.database, BOXRELAY_HOOKS_FILE: hooksFile };

    const list = await runCli(['dead-letters', 'list'], env);
    expect(list.code).toBe(0);
    const lines = list.stdout.trim().split('\n');
    expect(lines[0]).toBe('ID\tSINK\tATTEMPTS\tFAILED AT\tEVENT\tLAST ERROR');
    expect(lines.slice(1)).toEqual(
      rows.map((r, i) => [r.id, i < 3 ? 'alerts' : 'gone', 8, new Date(t.clock.now()).toISOString(), posted[i], 'http_500: hook answered 500'].join('\t')),
    );
    const page = await runCli(['dead-letters', 'list', '--sink', 'alerts', '--limit', '1', '--json'], env);
    expect(page.stdout.trim().split('\n').map((l) => JSON.parse(l).id)).toEqual([ids[0]]);

    const refused = await runCli(['dead-letters', 'retry', String(ids[3])], env);
    expect([refused.code, refused.stderr.trim()]).toEqual([1, 'boxrelay: sink "gone" is not configured']);
    expect((await runCli(['dead-letters', 'retry'], env)).code).toBe(1);
    expect((await runCli(['dead-letters', 'retry', '999999'], env)).stderr).toContain('no dead letter 999999');

    const retryOne = await runCli(['dead-letters', 'retry', String(ids[0])], env);
    expect(retryOne.stdout.trim()).toBe('retried 1 dead letter');
    expect((await outboxRows(t, 'alerts')).find((r) => r.id === ids[0])).toMatchObject({ status: 'pending', attempts: 0 });

    const discardOne = await runCli(['dead-letters', 'discard', String(ids[1])], env);
    expect(discardOne.stdout.trim()).toBe('discarded 1 dead letter');
    const retryAll = await runCli(['dead-letters', 'retry', '--all', '--sink', 'alerts'], env);
    expect(retryAll.stdout.trim()).toBe('retried 1 dead letter');
    const discardAll = await runCli(['dead-letters', 'discard', '--all'], env);
    expect(discardAll.stdout.trim()).toBe('discarded 1 dead letter');
    expect(await outbox.exceptions.countBySink('deadLetters')).toEqual({});

    // A server started now delivers the two retried rows; a replay queued meanwhile arrives at its next poll.
    t.clock.set(Date.now());
    await t.relay.start();
    await target.received(2);
    const replay = await runCli(['replay', '--since', since, '--sink', 'alerts'], env);
    expect(replay.stdout.trim()).toBe('queued 4 sink deliveries');
    t.clock.set(Date.now());
    await target.received(6);
    expect(new Set(target.requests.slice(2).map((r) => r.headers['webhook-id']))).toEqual(new Set(posted));
  });
});
