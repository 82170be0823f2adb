import request from 'supertest';
import { describe, expect, it } from 'vitest';
import { engines } from './support/databases.js';
import { waitFor } from './support/fanout.js';
import { adminAuth, fanoutFixture, hook } from './support/fanout-relay.js';
import type { TestRelay } from './support/relay.js';
import { SECRET, delivery, eventId, sendRaw } from './support/sign.js';

const PROD = 'whsec_cHJvZC11cGdyYWRlLXNlY3JldC0wMTIzNDU2Nzg=';

const { server, relay } = fanoutFixture();

const post = (t: TestRelay, path: string, id: string, secret: string) => {
  const d = delivery({ timestamp: t.clock.seconds, id, secret, boxId: 'bx_old', type: 'box.error' });
  return sendRaw(request(t.relay.publicApp).post(path).set(d.headers), d.body);
};

describe.each(engines)('accounts added to a database written without them (contract section 21, upgrades) on $name', (engine) => {
  it('keeps what was stored as the default account: work in flight goes out as before, dedup and box state stay default, a new account stays apart', async () => {
    const database = await engine.migratedUrl();
    // As the relay ran before accounts: one event stored, its hook down, so its delivery is in flight.
    const down = await server(() => 503);
    const id = eventId();
    const before = await relay({ database, hooks: [hook('alerts', down.url, { maxAttempts: 100 })] });
    expect((await post(before, '/webhooks', id, SECRET)).body).toEqual({ ok: true, id, duplicate: false });
    await waitFor(async () => down.requests.length >= 1, 'the hook to refuse it');
    await before.close();

    // The same database with an account configured and the hook back.
    const up = await server();
    const after = await relay({ database, hooks: [hook('alerts', up.url)], accounts: [{ name: 'prod', secrets: [PROD] }] });
    await waitFor(async () => up.requests.length >= 1, 'the event in flight to go out');
    expect(up.requests[0]?.headers['webhook-id']).toBe(id);
    // The CloudEvent is built from the stored payload as it goes out, so it names the account it was stored under.
    expect(JSON.parse(up.requests[0]?.body ?? '{}')).toMatchObject({ id, source: 'sandbox', boxrelayaccount: 'default' });

    // Stored before, so the default account's: a re-send is a duplicate there, and new to prod.
    expect((await post(after, '/webhooks', id, SECRET)).body).toEqual({ ok: true, id, duplicate: true });
    expect((await post(after, '/webhooks/prod', id, PROD)).body).toEqual({ ok: true, id, duplicate: false });
    await waitFor(async () => up.requests.length >= 2, "prod's event to go out");
    expect(up.requests.map((r) => r.headers['webhook-id'])).toEqual([id, `prod:${id}`]);
    // A replay of what was stored before names its account too.
    const replayed = await request(after.relay.internalApp).post('/admin/replay').set(adminAuth).send({ since: '2000-01-01T00:00:00Z', sink: 'alerts' });
    expect(replayed.body).toEqual({ ok: true, queued: 2 });
    await waitFor(async () => up.requests.length >= 4, 'the replay to go out');
    expect(up.requests.slice(2).map((r) => [r.headers['webhook-id'], (JSON.parse(r.body) as { boxrelayaccount?: string }).boxrelayaccount]).sort()).toEqual([
      [id, 'default'],
      [`prod:${id}`, 'prod'],
    ]);
    const boxes = await after.relay.store.database.kysely.selectFrom('boxes').select(['id', 'last_event_id']).orderBy('id').execute();
    expect(boxes).toEqual([
      { id: 'bx_old', last_event_id: id },
      { id: 'prod:bx_old', last_event_id: `prod:${id}` },
    ]);
  });
});
