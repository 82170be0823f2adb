import request from 'supertest';
import { describe, expect, it } from 'vitest';
import { engines } from './support/databases.js';
import { waitFor } from './support/fanout.js';
import { adminAuth, fanoutFixture, hook, metricValue } from './support/fanout-relay.js';
import type { TestRelay } from './support/relay.js';

const { server, relay } = fanoutFixture();

const MINUTE = 60_000;
const T0 = Date.UTC(2026, 10, 21, 10, 0, 0);
const iso = (ms: number) => new Date(ms).toISOString();

const stats = (t: TestRelay, query: string) => request(t.relay.internalApp).get(`/admin/stats${query}`).set(adminAuth);

/** Waits until the dispatcher has counted this many outcomes of a sink (the counts the stats keep). */
const counted = (t: TestRelay, sink: string, outcome: string, value: number) =>
  waitFor(async () => (await metricValue(t.registry, 'boxrelay_sink_deliveries_total', { sink, outcome })) === value, `${value} ${outcome} for ${sink}`);

describe.each(engines)('GET /admin/stats on $name', ({ url }) => {
  it('counts accepted events per type, deliveries and failed attempts per sink, in aligned buckets with the empty ones listed', async () => {
    const picky = await server(() => 422);
    const good = await server();
    const t = await relay({ database: await url(), hooks: [hook('picky', picky.url), hook('good', good.url)] });
    t.clock.set(T0 + 10_000);
    const first = await t.post({ type: 'box.ready', boxId: 'bx_1' });
    await t.post({ type: 'box.ready', boxId: 'bx_2' });
    // A duplicate is no new event.
    expect((await t.post({ id: first.deliveryId, type: 'box.ready', boxId: 'bx_1' })).body).toMatchObject({ duplicate: true });
    await counted(t, 'good', 'delivered', 2);
    await counted(t, 'picky', 'dead_lettered', 2);

    t.clock.set(T0 + MINUTE + 10_000);
    await t.post({ type: 'box.error', boxId: 'bx_1' });
    await counted(t, 'good', 'delivered', 3);
    await counted(t, 'picky', 'dead_lettered', 3);
    // A replay is no new event either; its deliveries are deliveries.
    const replay = await request(t.relay.internalApp).post('/admin/replay').set(adminAuth).send({ since: iso(T0), sink: 'good' });
    expect(replay.body).toEqual({ ok: true, queued: 3 });
    await counted(t, 'good', 'delivered', 6);

    t.clock.set(T0 + 2 * MINUTE + 30_000);
    const minutes = await stats(t, `?since=${iso(T0 + 5000)}&bucket=1m`);
    expect(minutes.status, minutes.text).toBe(200);
    expect(minutes.body).toEqual({
      ok: true,
      buckets: [
        { start: iso(T0), accepted: { 'box.ready': 2 }, delivered: { good: 2 }, failed: { picky: 2 } },
        { start: iso(T0 + MINUTE), accepted: { 'box.error': 1 }, delivered: { good: 4 }, failed: { picky: 1 } },
        { start: iso(T0 + 2 * MINUTE), accepted: {}, delivered: {}, failed: {} },
      ],
    });
    const fiveMinutes = await stats(t, `?since=${iso(T0 + 3 * MINUTE)}&bucket=5m`);
    expect(fiveMinutes.body.buckets).toEqual([{ start: iso(T0), accepted: { 'box.ready': 2, 'box.error': 1 }, delivered: { good: 6 }, failed: { picky: 3 } }]);
    // Defaults: the last 24 hours, by the hour.
    const day = await stats(t, '');
    expect(day.body.buckets).toHaveLength(25);
    expect(day.body.buckets[0].start).toBe(iso(T0 - 24 * 60 * MINUTE));
    expect(day.body.buckets.at(-1)).toEqual({ start: iso(T0), accepted: { 'box.ready': 2, 'box.error': 1 }, delivered: { good: 6 }, failed: { picky: 3 } });
    expect(day.body.buckets.slice(0, -1).every((b: object) => JSON.stringify(b).endsWith('"accepted":{},"delivered":{},"failed":{}}'))).toBe(true);
  });

  it('counts every failed attempt, retries included, and refuses bad parameters', async () => {
    // Two failed attempts, then delivered.
    const flaky = await server((_req, i) => (i < 2 ? 500 : 200));
    const t = await relay({ database: await url(), hooks: [hook('flaky', flaky.url)] });
    t.clock.set(T0);
    await t.post({ type: 'box.ready' });
    await counted(t, 'flaky', 'delivered', 1);
    expect((await stats(t, `?since=${iso(T0)}&bucket=1m`)).body.buckets).toEqual([
      { start: iso(T0), accepted: { 'box.ready': 1 }, delivered: { flaky: 1 }, failed: { flaky: 2 } },
    ]);

    // At most 500 buckets: 499 minutes back by the minute is the most.
    expect((await stats(t, `?since=${iso(T0 - 499 * MINUTE)}&bucket=1m`)).body.buckets).toHaveLength(500);
    for (const query of [
      `?since=${iso(T0 - 500 * MINUTE)}&bucket=1m`,
      '?bucket=2m',
      '?bucket=1d',
      '?bucket=1m&bucket=5m',
      '?since=yesterday',
      '?since=2026-11-21T10:00:00',
      `?since=${iso(T0 - 30 * 24 * 60 * MINUTE)}`,
    ]) {
      const response = await stats(t, query);
      expect([response.status, response.body.code], query).toEqual([400, 'invalid_request']);
    }
    expect((await request(t.relay.internalApp).get('/admin/stats')).status).toBe(401);
    expect((await request(t.relay.internalApp).post('/admin/stats').set(adminAuth)).status).toBe(405);
  });
});
