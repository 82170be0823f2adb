import { writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import request from 'supertest';
import { describe, expect, it } from 'vitest';
import { ADMIN_TOKEN, adminAuth, allDelivered, fanoutFixture, hook, metricValue } from './support/fanout-relay.js';
import { waitFor } from './support/fanout.js';
import type { HookRequest, HookServer } from './support/hook-server.js';
import type { TestRelay } from './support/relay.js';
import { sqliteFile } from './support/databases.js';
import { SECRET, delivery, sendRaw } from './support/sign.js';

/** Arrival times less one second apart: at most `limit` in any second means request i and i - limit are a second apart. */
const tooClose = (requests: HookRequest[], limit: number): number[][] => {
  const at = requests.map((r) => r.at).sort((a, b) => a - b);
  // A request is stamped when the receiver, on this test's event loop beside the relay (whose SQLite
  // calls block it), reads it: up to some tens of ms after it started. Without the gate they are ms apart.
  return at.flatMap((time, i) => (i >= limit && time - at[i - limit]! < 900 ? [[at[i - limit]!, time]] : []));
};

describe('maxPerSecond per hook', () => {
  const { server, relay, serve } = fanoutFixture();

  /**
   * One event through first: the first request of a process arrives late (undici loads lazily, the
   * connection opens), which would shorten the gap to the next; the others are compared without it.
   */
  const warmUp = async (t: TestRelay, target: HookServer, sink: string) => {
    await t.post({ boxId: 'bx_warm' });
    await target.received(1);
    await allDelivered(t, sink);
  };

  it('starts at most maxPerSecond requests in any second; the work above waits its turn, neither failed nor dead-lettered; per-box order holds', async () => {
    const target = await server();
    const t = await relay({ hooks: [hook('slow', target.url, { maxPerSecond: 2, concurrency: 4, maxAttempts: 1, ordering: 'per-box' })] });
    await warmUp(t, target, 'slow');
    const posted: Record<string, string[]> = { bx_a: [], bx_b: [] };
    for (let i = 0; i < 3; i++) {
      for (const boxId of ['bx_a', 'bx_b']) posted[boxId]!.push((await t.post({ type: 'box.ready', boxId })).deliveryId);
    }
    await target.received(7);
    await allDelivered(t, 'slow');
    expect(tooClose(target.requests.slice(1), 2)).toEqual([]);
    const events = target.requests.slice(1).map((r) => JSON.parse(r.body) as { id: string; subject: string });
    for (const boxId of ['bx_a', 'bx_b']) expect(events.filter((e) => e.subject === boxId).map((e) => e.id)).toEqual(posted[boxId]);
    expect(await metricValue(t.registry, 'boxrelay_sink_deliveries_total', { sink: 'slow', outcome: 'delivered' })).toBe(7);
    expect(await metricValue(t.registry, 'boxrelay_sink_deliveries_total', { sink: 'slow', outcome: 'retried' })).toBe(0);
    expect(await metricValue(t.registry, 'boxrelay_dead_letters', { sink: 'slow' })).toBe(0);
  });

  it('counts retries against the rate: a quick retry waits for the next turn', async () => {
    const target = await server((_req, i) => (i === 0 ? 503 : 200));
    const t = await relay({ hooks: [hook('flaky', target.url, { maxPerSecond: 1 })] });
    await t.post();
    const [first, second] = await target.received(2);
    expect(second!.at - first!.at).toBeGreaterThanOrEqual(900);
    await allDelivered(t, 'flaky');
    expect(await metricValue(t.registry, 'boxrelay_sink_deliveries_total', { sink: 'flaky', outcome: 'retried' })).toBe(1);
  });

  it('/admin/sinks shows a throttled hook with its backlog, and no longer once it has caught up', async () => {
    const [target, free] = [await server(), await server()];
    const t = await relay({ hooks: [hook('limited', target.url, { maxPerSecond: 1, concurrency: 2 }), hook('free', free.url)] });
    await warmUp(t, target, 'limited');
    for (let i = 0; i < 4; i++) await t.post();
    const sinks = async () => (await request(t.relay.internalApp).get('/admin/sinks').set(adminAuth)).body.sinks as { name: string; pending: number; throttled: boolean }[];
    const limited = await waitFor(async () => (await sinks()).find((s) => s.name === 'limited' && s.throttled), 'the hook to show as throttled');
    expect(limited.pending).toBeGreaterThan(0);
    expect((await sinks()).find((s) => s.name === 'free')).toMatchObject({ throttled: false });
    await allDelivered(t, 'limited');
    expect((await sinks()).find((s) => s.name === 'limited')).toMatchObject({ pending: 0, throttled: false });
    await target.received(5);
    expect(tooClose(target.requests.slice(1), 1)).toEqual([]);
  });

  it('`boxrelay serve` (fan-out in its worker thread) keeps the rate and reports the throttled hook', async () => {
    const target = await server();
    const database = sqliteFile();
    const hooksFile = join(dirname(database), 'hooks.yaml');
    writeFileSync(hooksFile, JSON.stringify([{ name: 'limited', url: target.url, maxPerSecond: 1, concurrency: 2 }]));
    const relayProcess = await serve({ BOXRELAY_SECRETS: SECRET, BOXRELAY_DATABASE: database, BOXRELAY_HOOKS_FILE: hooksFile, BOXRELAY_ADMIN_TOKEN: ADMIN_TOKEN });
    const internal = request(`http://127.0.0.1:${relayProcess.internalPort}`);
    for (let i = 0; i < 5; i++) {
      const d = delivery({ timestamp: Math.floor(Date.now() / 1000), boxId: `bx_${i}` });
      expect((await sendRaw(request(`http://127.0.0.1:${relayProcess.port}`).post('/webhooks').set(d.headers), d.body)).status).toBe(200);
    }
    const sinks = async () => (await internal.get('/admin/sinks').set(adminAuth)).body.sinks[0] as { pending: number; throttled: boolean };
    const throttled = await waitFor(async () => {
      const row = await sinks();
      return row.throttled ? row : undefined;
    }, 'the worker to report the hook as throttled');
    expect(throttled.pending).toBeGreaterThan(0);
    await target.received(5);
    await waitFor(async () => (await sinks()).pending === 0 && !(await sinks()).throttled, 'the backlog to drain');
    expect(tooClose(target.requests.slice(1), 1)).toEqual([]);
  });
});
