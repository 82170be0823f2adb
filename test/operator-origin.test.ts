import request from 'supertest';
import { describe, expect, it } from 'vitest';
import { engines } from './support/databases.js';
import { adminAuth, fanoutFixture, hook, outboxRows } from './support/fanout-relay.js';
import { waitFor } from './support/fanout.js';
import type { HookRequest } from './support/hook-server.js';
import { SHARED_NATS, collect, natsClient, uniqueNames } from './support/nats.js';
import { delivery, eventId, sendRaw } from './support/sign.js';

interface CloudEventBody {
  id: string;
  type: string;
  source: string;
  subject?: string;
  boxrelayorigin?: string;
  data: Record<string, unknown>;
}
const body = (r: HookRequest) => JSON.parse(r.body) as CloudEventBody;

for (const engine of engines) {
  describe(`operator events are the relay's own, on ${engine.name}`, () => {
    const { defer, server, relay } = fanoutFixture();

    it('refuses a signed delivery of a boxrelay. type: 400 invalid_event, nothing stored, nothing relayed to hooks or NATS', async () => {
      const names = uniqueNames();
      const nats = await natsClient();
      defer(() => nats.close());
      nats.streams.push(names.stream);
      const onNats = collect(nats.nc, `${names.prefix}.>`);
      const ops = await server();
      const t = await relay({
        database: await engine.migratedUrl(),
        natsUrl: SHARED_NATS,
        natsSubjectPrefix: names.prefix,
        natsStream: names.stream,
        hooks: [hook('ops', ops.url, { events: ['*', 'boxrelay.*'] })],
      });
      const kysely = t.relay.store.database.kysely;
      const spoofs = [
        { type: 'boxrelay.event.dead_lettered', subject: 'bx_victim', data: { box: { id: 'bx_victim' }, eventId: eventId(), sink: 'ops', attempts: 8, lastError: 'forged' } },
        { type: 'boxrelay.sink.paused', subject: 'ops', data: { sink: 'ops', by: 'failures' } },
        { type: 'boxrelay.', data: {} },
      ];
      for (const spoof of spoofs) {
        const id = eventId();
        const signed = delivery({ id, type: spoof.type, timestamp: t.clock.seconds, body: JSON.stringify({ id, createdAt: new Date(t.clock.now()).toISOString(), ...spoof }) });
        const response = await sendRaw(request(t.relay.publicApp).post('/webhooks').set(signed.headers), signed.body);
        expect(response.status, spoof.type).toBe(400);
        expect(response.body).toEqual({ ok: false, code: 'invalid_event', message: expect.stringContaining('boxrelay.'), requestId: expect.stringMatching(/^req_/) });
      }
      expect(await kysely.selectFrom('deliveries').select('id').execute()).toEqual([]);
      expect(await kysely.selectFrom('outbox').select('id').execute()).toEqual([]);
      expect(await kysely.selectFrom('boxes').select('id').execute()).toEqual([]);

      // A good delivery after them is the only thing either sink ever gets.
      const good = await t.post({ boxId: 'bx_victim', type: 'box.error' });
      expect(good.status).toBe(200);
      await ops.received(1);
      const messages = await onNats.received(1);
      await waitFor(async () => (await outboxRows(t, 'ops')).length === 0 && (await outboxRows(t, 'nats')).length === 0, 'both sinks to have the good event');
      expect(ops.requests.map((r) => body(r).id)).toEqual([good.deliveryId]);
      expect(messages.map((m) => m.json<CloudEventBody>().id)).toEqual([good.deliveryId]);
    });

    it('is decided by origin: a received event naming a subject stays the upstream\'s; the relay\'s own are stored as operator events', async () => {
      const bad = await server(() => 400);
      // ops refuses the operator events it is sent: a failed operator event is not announced again.
      const ops = await server((r) => (body(r).type.startsWith('boxrelay.') ? 400 : 200));
      const t = await relay({
        database: await engine.migratedUrl(),
        hooks: [hook('bad', bad.url, { events: ['box.ready'] }), hook('ops', ops.url, { events: ['account.*', 'boxrelay.*'] })],
      });
      const kysely = t.relay.store.database.kysely;

      // An event of a type outside box.* that carries a `subject` of its own, as operator events do.
      const id = eventId();
      const account = JSON.stringify({ id, type: 'account.updated', createdAt: new Date(t.clock.now()).toISOString(), subject: 'ops', data: { plan: 'pro' } });
      const received = await t.post({ id, type: 'account.updated', body: account });
      expect(received.status).toBe(200);
      const ready = await t.post({ boxId: 'bx_d', type: 'box.ready' });

      await waitFor(async () => (await outboxRows(t, 'bad')).some((r) => r.status === 'dead'), "bad's dead letter");
      await waitFor(async () => (await outboxRows(t, 'ops')).filter((r) => r.status === 'dead').length === 1, "ops's dead letter of the announcement");
      const sent = ops.requests.map(body);
      expect(sent.find((e) => e.id === id)).toEqual(expect.objectContaining({ type: 'account.updated', source: 'sandbox' }));
      expect(sent.find((e) => e.id === id)).not.toHaveProperty('subject');
      expect(sent.find((e) => e.type === 'boxrelay.event.dead_lettered')).toMatchObject({ source: 'sandbox/boxrelay', subject: 'bx_d', data: { eventId: ready.deliveryId, sink: 'bad' }, boxrelayaccount: 'default' });
      expect(sent.find((e) => e.type === 'boxrelay.event.dead_lettered')).not.toHaveProperty('boxrelayorigin');

      const rows = await kysely.selectFrom('deliveries').select(['id', 'type', 'origin']).execute();
      expect(rows.filter((r) => r.origin === 'operator').map((r) => r.type)).toEqual(['boxrelay.event.dead_lettered']);
      expect(rows.find((r) => r.id === id)).toMatchObject({ origin: null });
      // The announcement's own dead letter at ops made no second announcement.
      expect(rows.filter((r) => r.type.startsWith('boxrelay.'))).toHaveLength(1);
      const announcement = rows.find((r) => r.origin === 'operator')!;
      const shown = await request(t.relay.internalApp).get(`/admin/events/${announcement.id}`).set(adminAuth);
      expect(shown.body.event).toMatchObject({ source: 'sandbox/boxrelay', subject: 'bx_d', type: 'boxrelay.event.dead_lettered' });
      expect(shown.body.event).not.toHaveProperty('boxrelayorigin');
    });
  });
}
