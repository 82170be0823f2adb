import { describe, expect, it } from 'vitest';
import { createFanoutStore } from '../src/store/fanout-store.js';
import { openStore } from '../src/store/store.js';
import { postgresSchema } from './support/databases.js';
import { allDelivered, fanoutFixture, hook, storedWork } from './support/fanout-relay.js';
import { recordEvent } from './support/fanout.js';
import type { HookServer } from './support/hook-server.js';

describe('dispatcher', () => {
  const { server, relay, defer } = fanoutFixture();
  const ids = (s: HookServer) => s.requests.map((r) => r.headers['webhook-id']);

  it('delivers in order of arrival, with no more requests in flight than the hook concurrency', async () => {
    // Each answer takes 15 ms: a second request sent meanwhile would be held by the server at once with the first.
    const target = await server(() => ({ status: 200, delayMs: 15 }));
    // The same count sees a wider hook's concurrency: its answers take long enough for all three to be held at once.
    const wide = await server(() => ({ status: 200, delayMs: 300 }));
    const t = await relay({ hooks: [hook('serial', target.url, { concurrency: 1 }), hook('wide', wide.url, { concurrency: 3 })] }, { start: false });
    const posted = [];
    for (let i = 0; i < 10; i++) posted.push((await t.post({ boxId: `bx_${i}` })).deliveryId);
    await t.relay.start();
    await target.received(10);
    await wide.received(10);
    expect(ids(target)).toEqual(posted);
    expect(target.mostInFlight).toBe(1);
    expect(wide.mostInFlight).toBe(3);
  });

  it('never sends a row twice when a claim finds it again while its attempt is still under way (its lease ran out meanwhile)', async () => {
    const slow = await server((_req, i) => (i === 0 ? { status: 200, delayMs: 300 } : 200));
    const t = await relay({ hooks: [hook('h', slow.url)] });
    const first = (await t.post({ boxId: 'bx_a' })).deliveryId;
    await slow.receivedAtLeast(1);
    // The first attempt is still under way when its lease has run out: the next claim finds its row again.
    t.clock.advance(60 * 60_000);
    const second = (await t.post({ boxId: 'bx_b' })).deliveryId;
    await slow.received(2);
    await allDelivered(t, 'h');
    expect(ids(slow)).toEqual([first, second]);
  });

  it('on stop lets calls in flight finish within the grace, then cuts and releases the rest', async () => {
    const slow = await server(() => ({ status: 200, delayMs: 100 }));
    const a = await relay({ hooks: [hook('h', slow.url)] });
    await a.post();
    await slow.received(1);
    await a.close();
    expect(await storedWork(a, 'h')).toEqual({ unfinished: new Set(), rows: [], held: [] });

    const silent = await server(() => 'hang');
    const b = await relay({ hooks: [hook('h', silent.url, { concurrency: 2 })], shutdownTimeoutMs: 200 });
    for (let i = 0; i < 3; i++) await b.post();
    await silent.received(2);
    await b.close();
    // A cut attempt is not counted against the hook: left in the log after the stored cursor, as if never tried.
    const { unfinished, rows, held } = await storedWork(b, 'h');
    expect([unfinished.size, rows, held]).toEqual([3, [], []]);

    const answering = await server();
    await relay({ database: b.config.database, hooks: [hook('h', answering.url)] });
    await answering.received(3);
    expect(new Set(ids(answering)).size).toBe(3);
  });

  it('picks up work committed by another process at the next poll', async () => {
    const target = await server();
    const t = await relay({ hooks: [hook('h', target.url)] });
    const other = await openStore({ url: t.config.database });
    defer(() => other.close());
    const id = await recordEvent(other, { receivedAt: t.clock.now(), sinks: ['h'] });
    const [req] = await target.received(1);
    expect(req!.headers['webhook-id']).toBe(id);
    expect(await createFanoutStore(other.database).exceptions.replay({ since: 0, now: t.clock.now(), sinksFor: () => ['h'], configured: ['h'] })).toBe(1);
    await target.received(2);
  });

  it('shares the work of one PostgreSQL database between replicas, each event delivered once', async () => {
    const target = await server(() => ({ status: 200, delayMs: 5 }));
    const database = await postgresSchema();
    const hooks = [hook('h', target.url, { concurrency: 3 })];
    const a = await relay({ database, hooks });
    const b = await relay({ database, hooks });
    const posted = new Set<string>();
    for (let i = 0; i < 40; i++) posted.add((await (i % 2 ? a : b).post({ boxId: `bx_${i}` })).deliveryId);
    await target.received(40);
    await allDelivered(a, 'h');
    // A second copy may still be on its way once the rows are settled: stopping both replicas waits
    // for every call in flight, so the hook has then seen every request it will ever get.
    await a.close();
    await b.close();
    expect(ids(target).sort()).toEqual([...posted].sort());
  });
});
