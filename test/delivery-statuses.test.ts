import request from 'supertest';
import { describe, expect, it } from 'vitest';
import { defaultTuning } from '../src/dispatch/tuning.js';
import { adminAuth, allDelivered, fanoutFixture, fastTuning, hook } from './support/fanout-relay.js';
import { engines } from './support/databases.js';
import { waitFor } from './support/fanout.js';
import type { TestRelay } from './support/relay.js';

interface Delivery {
  sink: string;
  status: string;
  attempts: number;
  lastError: string | null;
  updatedAt: string;
}

const { server, relay } = fanoutFixture();

/**
 * `GET /admin/events/:id` lists exactly the sinks an event was routed to, each with its true status
 * (contract section 6), read black-box through the admin API.
 */
describe.each(engines)('delivery statuses on $name', (engine) => {
  const get = (t: TestRelay, path: string) => request(t.relay.internalApp).get(path).set(adminAuth);
  const deliveriesOf = async (t: TestRelay, id: string): Promise<Delivery[]> => {
    const response = await get(t, `/admin/events/${id}`);
    expect(response.status, response.text).toBe(200);
    return response.body.deliveries;
  };
  const statusesOf = async (t: TestRelay, id: string) => Object.fromEntries((await deliveriesOf(t, id)).map((d) => [d.sink, d.status]));
  const iso = (t: TestRelay) => new Date(t.clock.now()).toISOString();

  it('a discarded dead letter reads discarded, never delivered, with what its attempts did', async () => {
    const picky = await server(() => 422);
    const t = await relay({ database: await engine.migratedUrl(), hooks: [hook('picky', picky.url)] });
    const { deliveryId } = await t.post();
    await waitFor(async () => (await statusesOf(t, deliveryId)).picky === 'dead_lettered', 'the dead letter');
    const [deadLetter] = (await get(t, '/admin/dead-letters')).body.deadLetters as { id: number }[];
    const failedAt = iso(t);
    t.clock.advance(5000);
    expect((await request(t.relay.internalApp).delete(`/admin/dead-letters/${deadLetter!.id}`).set(adminAuth)).status).toBe(204);
    expect(await deliveriesOf(t, deliveryId)).toEqual([
      { sink: 'picky', status: 'discarded', attempts: 1, lastError: 'http_422: hook answered 422', updatedAt: iso(t) },
    ]);
    expect(failedAt).not.toBe(iso(t));
    expect((await get(t, '/admin/dead-letters')).body.deadLetters).toEqual([]);
  });

  it('a hook added after the event is not listed; a replay for it routes the event to it (its routing takes the event now)', async () => {
    const receiver = await server();
    const database = await engine.migratedUrl();
    const before = await relay({ database, hooks: [hook('early', receiver.url)] });
    const { deliveryId } = await before.post();
    await allDelivered(before, 'early');
    await before.close();

    const after = await relay({ database, hooks: [hook('early', receiver.url), hook('late', receiver.url)] });
    expect(await deliveriesOf(after, deliveryId)).toEqual([{ sink: 'early', status: 'delivered', attempts: 1, lastError: null, updatedAt: expect.any(String) }]);

    const replay = await request(after.relay.internalApp).post('/admin/replay').set(adminAuth).send({ since: '2000-01-01T00:00:00Z', sink: 'late' });
    expect([replay.status, replay.body]).toEqual([202, { ok: true, queued: 1 }]);
    await waitFor(async () => (await statusesOf(after, deliveryId)).late === 'delivered', 'the replay delivered to late');
    expect(await statusesOf(after, deliveryId)).toEqual({ early: 'delivered', late: 'delivered' });
    expect(receiver.requests.filter((r) => r.headers['webhook-id'] === deliveryId)).toHaveLength(2);
  });

  it('an operator event lists the sinks it was sent to: never the sink it is about, nor a hook that did not ask for it', async () => {
    const picky = await server(() => 422);
    const ops = await server();
    const everything = await server();
    const t = await relay({
      database: await engine.migratedUrl(),
      hooks: [hook('picky', picky.url, { events: ['*', 'boxrelay.*'] }), hook('ops', ops.url, { events: ['boxrelay.*'] }), hook('all', everything.url)],
    });
    const { deliveryId } = await t.post({ type: 'box.error' });
    await waitFor(async () => (await statusesOf(t, deliveryId)).picky === 'dead_lettered', 'the dead letter');
    const listed = await waitFor(async () => (await get(t, '/admin/events?type=boxrelay.event.dead_lettered')).body.events[0], 'the operator event');
    await waitFor(async () => (await statusesOf(t, listed.id)).ops === 'delivered', 'the operator event delivered');
    expect(await deliveriesOf(t, listed.id)).toEqual([{ sink: 'ops', status: 'delivered', attempts: 1, lastError: null, updatedAt: expect.any(String) }]);
    expect(await statusesOf(t, deliveryId)).toEqual({ picky: 'dead_lettered', all: 'delivered' });
  });

  it('work of a sink no replica serves any more is set aside, after the grace on a shared database', async () => {
    const receiver = await server();
    const database = await engine.migratedUrl();
    const before = await relay({ database, hooks: [hook('gone', receiver.url), hook('kept', receiver.url)] }, { start: false });
    const { deliveryId } = await before.post();
    await before.close();

    // SQLite: the only process of its file sets aside from its start (beside its lanes). PostgreSQL:
    // only once no replica has served `gone` for the grace (the default ten minutes; nothing announced
    // it, so it counts from this start), as each replica checks from its start and then in its heartbeat.
    const after = await relay({ database, hooks: [hook('kept', receiver.url)] });
    await allDelivered(after, 'kept');
    if (engine.name === 'postgres') {
      expect((await statusesOf(after, deliveryId)).gone).toBe('pending');
      // The grace runs out on the database's clock: as the heartbeat row reads once it has.
      await after.relay.store.database.kysely
        .updateTable('sink_servers')
        .set((eb) => ({ served_at: eb('served_at', '-', defaultTuning.unservedGraceMs + 1) }))
        .where('sink', '=', 'gone')
        .execute();
      // The next replica to start finds nobody served it for the grace.
      await relay({ database, hooks: [hook('kept', receiver.url)] });
    }
    await waitFor(async () => (await statusesOf(after, deliveryId)).gone === 'set_aside', 'the work of gone set aside');
    expect(await deliveriesOf(after, deliveryId)).toEqual([
      { sink: 'gone', status: 'set_aside', attempts: 0, lastError: 'sink not configured', updatedAt: expect.any(String) },
      { sink: 'kept', status: 'delivered', attempts: 1, lastError: null, updatedAt: expect.any(String) },
    ]);
    expect((await get(after, '/admin/dead-letters?sink=gone')).body.deadLetters).toMatchObject([{ eventId: deliveryId, sink: 'gone' }]);
  });

  it('a delivery after retries keeps its attempts, last error and delivery time', async () => {
    // Two quick attempts fail in the first claim, one in the second (scheduled retries are due at once here); the fourth is delivered.
    const flaky = await server((_req, i) => (i < 3 ? 503 : 200));
    const t = await relay({ database: await engine.migratedUrl(), hooks: [hook('flaky', flaky.url)] }, { dispatch: { ...fastTuning, quickRetries: 1 } });
    const { deliveryId } = await t.post();
    await waitFor(async () => (await statusesOf(t, deliveryId)).flaky === 'delivered', 'the delivery');
    expect(await deliveriesOf(t, deliveryId)).toEqual([
      { sink: 'flaky', status: 'delivered', attempts: 4, lastError: 'http_503: hook answered 503', updatedAt: iso(t) },
    ]);
    expect(flaky.requests).toHaveLength(4);
  });
});
