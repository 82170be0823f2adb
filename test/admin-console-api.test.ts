import request from 'supertest';
import { describe, expect, it } from 'vitest';
import { eventDeliveries } from '../src/dispatch/delivery-status.js';
import { adminAuth, allDelivered, fanoutFixture, hook, outboxRows } from './support/fanout-relay.js';
import { engines } from './support/databases.js';
import { recordEvent, waitFor } from './support/fanout.js';

const { server, relay } = fanoutFixture();

describe('admin API additions for the console (contract section 6)', () => {
  it('GET /admin/events/:id: the CloudEvent and where it stands with each sink', async () => {
    const picky = await server(() => 422);
    const good = await server();
    // `archive` takes another type only: the event is not routed to it, so it is not listed.
    const t = await relay({ hooks: [hook('picky', picky.url), hook('good', good.url), hook('archive', good.url, { events: ['box.archived'] })] });
    const app = t.relay.internalApp;
    const posted = await t.post({ type: 'box.error', boxId: 'bx_abc', boxName: 'ci-42' });
    await waitFor(async () => (await outboxRows(t, 'picky')).every((r) => r.status === 'dead'), 'the dead letter');
    await allDelivered(t, 'good');

    const response = await request(app).get(`/admin/events/${posted.deliveryId}`).set(adminAuth);
    const now = new Date(t.clock.now()).toISOString();
    expect([response.status, response.body]).toEqual([
      200,
      {
        ok: true,
        event: {
          specversion: '1.0',
          id: posted.deliveryId,
          source: 'sandbox',
          type: 'box.error',
          subject: 'bx_abc',
          time: now,
          datacontenttype: 'application/json',
          data: { box: { id: 'bx_abc', name: 'ci-42' }, previousState: 'cloning', state: 'error' },
          boxrelayaccount: 'default',
          account: 'default',
          receivedAt: now,
        },
        deliveries: [
          { sink: 'picky', status: 'dead_lettered', attempts: 1, lastError: 'http_422: hook answered 422', updatedAt: now },
          { sink: 'good', status: 'delivered', attempts: 1, lastError: null, updatedAt: now },
        ],
      },
    ]);

    const missing = await request(app).get('/admin/events/evt_nope').set(adminAuth);
    expect([missing.status, missing.body.code]).toEqual([404, 'not_found']);
    expect((await request(app).get(`/admin/events/${posted.deliveryId}`)).status).toBe(401);
    expect((await request(app).delete(`/admin/events/${posted.deliveryId}`).set(adminAuth)).status).toBe(405);
  });

  it('GET /admin/events/:id: pending work, and work of a sink no longer configured set aside', async () => {
    const good = await server();
    const t = await relay({ hooks: [hook('good', good.url)] }, { start: false });
    const id = await recordEvent(t.relay.store, { receivedAt: t.clock.now(), sinks: ['good', 'gone'] });
    const deliveries = async () => (await request(t.relay.internalApp).get(`/admin/events/${id}`).set(adminAuth)).body.deliveries;
    const now = new Date(t.clock.now()).toISOString();
    expect(await deliveries()).toEqual([
      { sink: 'good', status: 'pending', attempts: 0, lastError: null, updatedAt: now },
      { sink: 'gone', status: 'pending', attempts: 0, lastError: null, updatedAt: now },
    ]);
    // The only process of its SQLite file: work of a sink it does not serve is set aside from its start.
    await t.relay.start();
    await allDelivered(t, 'good');
    await waitFor(async () => (await deliveries())[1].status === 'set_aside', 'the work of gone set aside');
    expect(await deliveries()).toEqual([
      { sink: 'good', status: 'delivered', attempts: 1, lastError: null, updatedAt: now },
      { sink: 'gone', status: 'set_aside', attempts: 0, lastError: 'sink not configured', updatedAt: now },
    ]);
  });

  it('GET /admin/sinks: each configured sink, up, paused, pending and dead letters', async () => {
    const picky = await server(() => 422);
    const good = await server();
    const t = await relay({ hooks: [hook('picky', picky.url), hook('good', good.url)] });
    await t.post();
    await t.post();
    await waitFor(async () => (await outboxRows(t, 'picky')).filter((r) => r.status === 'dead').length === 2, 'two dead letters');
    await allDelivered(t, 'good');
    const response = await request(t.relay.internalApp).get('/admin/sinks').set(adminAuth);
    expect([response.status, response.body]).toEqual([
      200,
      {
        ok: true,
        sinks: [
          { name: 'picky', kind: 'hook', up: true, paused: false, pending: 0, throttled: false, deadLetters: 2 },
          { name: 'good', kind: 'hook', up: true, paused: false, pending: 0, throttled: false, deadLetters: 0 },
        ],
      },
    ]);
    expect((await request(t.relay.internalApp).get('/admin/sinks')).status).toBe(401);
  });

  it('POST /admin/dead-letters/retry: every dead letter of one sink', async () => {
    const picky = await server((_req, i) => (i < 2 ? 422 : 200));
    const other = await server(() => 422);
    const t = await relay({ hooks: [hook('picky', picky.url), hook('other', other.url)] });
    await t.post();
    await t.post();
    const deadOf = async (sink: string) => (await outboxRows(t, sink)).filter((r) => r.status === 'dead').length;
    await waitFor(async () => (await deadOf('picky')) === 2 && (await deadOf('other')) === 2, 'four dead letters');
    const app = t.relay.internalApp;
    for (const bad of [{ sink: 'nope' }, { sink: 5 }, { extra: 1 }]) {
      const refused = await request(app).post('/admin/dead-letters/retry').set(adminAuth).send(bad);
      expect([refused.status, refused.body.code]).toEqual([400, 'invalid_request']);
    }
    expect(await deadOf('picky')).toBe(2);
    const retried = await request(app).post('/admin/dead-letters/retry').set(adminAuth).send({ sink: 'picky' });
    expect([retried.status, retried.body]).toEqual([202, { ok: true, retried: 2 }]);
    await allDelivered(t, 'picky');
    expect(await deadOf('other')).toBe(2);
    expect((await request(app).get('/admin/dead-letters/retry').set(adminAuth)).status).toBe(405);
  });

  it('counts the newest row of a sink when a replay added another', () => {
    const row = (status: 'pending' | 'dead', attempts: number) => ({ sink: 'good', status, attempts, lastError: null, updatedAt: 0 });
    expect(eventDeliveries([row('dead', 5), row('pending', 0)])).toEqual([
      { sink: 'good', status: 'pending', attempts: 0, lastError: null, updatedAt: new Date(0).toISOString() },
    ]);
  });

  it.each(engines)('GET /admin/boxes?q= on $name: id or name contains the text, in any case, wildcards taken literally', async (engine) => {
    const t = await relay({ database: await engine.migratedUrl() });
    await t.post({ boxId: 'bx_one', boxName: 'CI-42' });
    await t.post({ boxId: 'bx_two', boxName: 'deploy' });
    const ids = async (q: string) =>
      (await request(t.relay.internalApp).get(`/admin/boxes?q=${encodeURIComponent(q)}`).set(adminAuth)).body.boxes.map((b: { id: string }) => b.id);
    expect(await ids('ci-4')).toEqual(['bx_one']);
    expect(await ids('BX_')).toEqual(['bx_one', 'bx_two']);
    expect(await ids('TWO')).toEqual(['bx_two']);
    expect(await ids('%')).toEqual([]);
    expect(await ids('bx%')).toEqual([]);
  });
});
