import request from 'supertest';
import { describe, expect, it } from 'vitest';
import { engines } from './support/databases.js';
import { waitFor } from './support/fanout.js';
import { adminAuth, allDelivered, fanoutFixture, hook, outboxRows, pendingCount } from './support/fanout-relay.js';
import type { TestRelay } from './support/relay.js';

const { server, relay } = fanoutFixture();

/** The status an event reads for one sink (`GET /admin/events/:id`). */
async function statusOf(t: TestRelay, eventId: string, sink: string): Promise<string | undefined> {
  const answer = await request(t.relay.internalApp).get(`/admin/events/${eventId}`).set(adminAuth);
  expect(answer.status).toBe(200);
  return (answer.body.deliveries as { sink: string; status: string }[]).find((d) => d.sink === sink)?.status;
}

async function deadLetterIds(t: TestRelay, sink: string): Promise<string[]> {
  const answer = await request(t.relay.internalApp).get(`/admin/dead-letters?sink=${sink}`).set(adminAuth);
  expect(answer.status).toBe(200);
  return (answer.body.deadLetters as { eventId: string }[]).map((d) => d.eventId).sort();
}

/** How many pending rows each event has for the sink. */
async function pendingRowsPerEvent(t: TestRelay, sink: string): Promise<Record<string, number>> {
  const rows = (await outboxRows(t, sink)).filter((row) => row.status === 'pending');
  const counts: Record<string, number> = {};
  for (const row of rows) counts[row.delivery_id] = (counts[row.delivery_id] ?? 0) + 1;
  return counts;
}

/** The sink has tried everything it was given: nothing pending in its outbox or its log. */
const settled = (t: TestRelay, sink: string) =>
  waitFor(async () => (await pendingCount(t, sink)) === 0 && (await outboxRows(t, sink)).every((row) => row.status !== 'pending'), `${sink} to settle its work`);

describe.each(engines)('dead letters after resends and replays on $name', (engine) => {
  it('are retried (for the sink, for all, by id) whatever resends and replays made of them: each event pending once, then delivered', async () => {
    let accepting = false;
    const picky = await server(() => (accepting ? 200 : 400));
    const t = await relay({ database: await engine.migratedUrl(), hooks: [hook('picky', picky.url)] });
    const app = t.relay.internalApp;
    const since = new Date(t.clock.now() - 1000).toISOString();
    const events = [(await t.post({ boxId: 'bx_1' })).deliveryId, (await t.post({ boxId: 'bx_2' })).deliveryId].sort();
    let sent = 2;
    await picky.received(sent);
    await settled(t, 'picky');
    expect(await deadLetterIds(t, 'picky')).toEqual(events);

    /** Each event sent again by a resend, then by a replay of the sink, and dead-lettered again each time. */
    const deadAgain = async () => {
      accepting = false;
      for (const eventId of events) {
        const resent = await request(app).post(`/admin/events/${eventId}/resend`).set(adminAuth).send({ sink: 'picky' });
        expect([resent.status, resent.body]).toEqual([202, { ok: true, queued: 1 }]);
        await picky.received(++sent);
        await settled(t, 'picky');
      }
      const replayed = await request(app).post('/admin/replay').set(adminAuth).send({ since, sink: 'picky' });
      expect([replayed.status, replayed.body]).toEqual([202, { ok: true, queued: 2 }]);
      await picky.received((sent += 2));
      await settled(t, 'picky');
      expect(await deadLetterIds(t, 'picky')).toEqual(events);
      for (const eventId of events) expect(await statusOf(t, eventId, 'picky')).toBe('dead_lettered');
      // Paused by hand, so the retried work stays pending to be looked at.
      expect((await request(app).post('/admin/sinks/picky/pause').set(adminAuth)).status).toBe(200);
    };
    /** The retried events are pending once each and no longer dead letters; resumed, each is delivered with one request. */
    const deliveredOnce = async (retried: string[]) => {
      expect(await pendingRowsPerEvent(t, 'picky')).toEqual(Object.fromEntries(retried.map((eventId) => [eventId, 1])));
      for (const eventId of retried) expect(await statusOf(t, eventId, 'picky')).toBe('pending');
      expect(await deadLetterIds(t, 'picky')).toEqual(events.filter((eventId) => !retried.includes(eventId)));
      accepting = true;
      expect((await request(app).post('/admin/sinks/picky/resume').set(adminAuth)).status).toBe(200);
      await picky.received((sent += retried.length));
      await settled(t, 'picky');
      for (const eventId of retried) expect(await statusOf(t, eventId, 'picky')).toBe('delivered');
    };

    await deadAgain();
    const forSink = await request(app).post('/admin/dead-letters/retry').set(adminAuth).send({ sink: 'picky' });
    expect([forSink.status, forSink.body]).toEqual([202, { ok: true, retried: 2 }]);
    await deliveredOnce(events);

    await deadAgain();
    const forAll = await request(app).post('/admin/dead-letters/retry').set(adminAuth).send({});
    expect([forAll.status, forAll.body]).toEqual([202, { ok: true, retried: 2 }]);
    await deliveredOnce(events);

    await deadAgain();
    const [listed] = (await request(app).get('/admin/dead-letters?sink=picky&limit=1').set(adminAuth)).body.deadLetters as { id: number; eventId: string }[];
    expect((await request(app).post(`/admin/dead-letters/${listed!.id}/retry`).set(adminAuth)).status).toBe(202);
    await deliveredOnce([listed!.eventId]);
  });
});

describe.each(engines)('a replay or a resend racing the lane on $name', (engine) => {
  it('a replay made while the log lane attempts the event is sent, and the lane refused meanwhile leaves no dead letter behind it', async () => {
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    // The log lane's attempt is held, then refused; the replay's is accepted.
    const h = await server((_request, i) => (i === 0 ? { status: 400, until: held } : 200));
    const t = await relay({ database: await engine.migratedUrl(), hooks: [hook('h', h.url, { concurrency: 4 })] });
    const since = new Date(t.clock.now() - 1000).toISOString();
    const { deliveryId } = await t.post({ boxId: 'bx_1' });
    await h.received(1);

    const replayed = await request(t.relay.internalApp).post('/admin/replay').set(adminAuth).send({ since, sink: 'h' });
    expect([replayed.status, replayed.body]).toEqual([202, { ok: true, queued: 1 }]);
    await h.received(2);
    await waitFor(async () => (await statusOf(t, deliveryId, 'h')) === 'delivered', 'the replay delivered');

    release();
    // The lane's refusal is recorded as an attempt, and its cursor passes the event.
    await waitFor(async () => {
      const attempts = await request(t.relay.internalApp).get(`/admin/events/${deliveryId}/attempts?sink=h`).set(adminAuth);
      return attempts.body.attempts?.length === 2 && (await pendingCount(t, 'h')) === 0;
    }, "the lane's attempt settled");
    await allDelivered(t, 'h');
    expect(await statusOf(t, deliveryId, 'h')).toBe('delivered');
    expect(await deadLetterIds(t, 'h')).toEqual([]);
  });

  it('a resend made while a retried row is attempted sends the event again once that attempt ends', async () => {
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    // Refused at first (a dead letter); its retry is held, then accepted; the resend's is accepted.
    const h = await server((_request, i) => (i === 0 ? 400 : i === 1 ? { status: 200, until: held } : 200));
    const t = await relay({ database: await engine.migratedUrl(), hooks: [hook('h', h.url, { concurrency: 4 })] });
    const app = t.relay.internalApp;
    const { deliveryId } = await t.post({ boxId: 'bx_1' });
    await h.received(1);
    await settled(t, 'h');
    const [deadLetter] = (await request(app).get('/admin/dead-letters?sink=h').set(adminAuth)).body.deadLetters as { id: number }[];
    expect((await request(app).post(`/admin/dead-letters/${deadLetter!.id}/retry`).set(adminAuth)).status).toBe(202);
    await h.received(2);

    const resent = await request(app).post(`/admin/events/${deliveryId}/resend`).set(adminAuth).send({ sink: 'h' });
    expect([resent.status, resent.body]).toEqual([202, { ok: true, queued: 1 }]);
    release();
    await h.received(3);
    await allDelivered(t, 'h');
    expect(await statusOf(t, deliveryId, 'h')).toBe('delivered');
    expect(h.requests.map((r) => r.headers['webhook-id'])).toEqual([deliveryId, deliveryId, deliveryId]);
  });
});
