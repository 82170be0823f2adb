import request from 'supertest';
import { describe, expect, it } from 'vitest';
import { ManualClock } from './support/clock.js';
import { engines } from './support/databases.js';
import { adminAuth, fanoutFixture, hook } from './support/fanout-relay.js';
import type { HookRequest } from './support/hook-server.js';
import type { TestRelay } from './support/relay.js';
import { SECRET, delivery, sendRaw, type DeliveryOptions } from './support/sign.js';
import { RELEASE_EVENTS, releaseDatabase, restoreRelease } from './fixtures/release-a6e83e3/fixture.js';

const PROD = 'whsec_cHJvZC1yZWxlYXNlLWE2ZTgzZTMtc2VjcmV0LTAx';
// Never reached: the runs are not scheduled, the credentials only make each account's reconciliation reported.
const UPSTREAM = { upstreamBaseUrl: 'http://127.0.0.1:9/v1', upstreamApiKey: 'box_0123456789abcdef0123456789abcdef' };
const OLD_IDS = RELEASE_EVENTS.map((e) => e.id);
const [FIRST] = RELEASE_EVENTS;

const { server, relay } = fanoutFixture();

const post = (t: TestRelay, path: string, options: Partial<DeliveryOptions> & { secret: string }) => {
  const d = delivery({ timestamp: t.clock.seconds, ...options });
  return sendRaw(request(t.relay.publicApp).post(path).set(d.headers), d.body);
};
const admin = (t: TestRelay, path: string) => request(t.relay.internalApp).get(path).set(adminAuth);
const sent = (requests: HookRequest[]) =>
  requests.map((r) => [r.headers['webhook-id'], (JSON.parse(r.body) as { boxrelayaccount?: string }).boxrelayaccount]).sort();

describe.each(engines)('a database release a6e83e3 wrote (0.1.0: migrations 001 to 016, no accounts), opened with an account configured, on $name', (engine) => {
  it("is the default account's: its work in flight goes out, its dedup, boxes, secret and reconciliation run are default's, prod starts empty", async () => {
    const database = await restoreRelease(engine.name);
    const release = releaseDatabase(engine.name);
    // alerts was answering 503 when the release stopped, audit had taken every event.
    const alerts = await server();
    const audit = await server();
    const t = await relay(
      {
        database,
        hooks: [hook('alerts', alerts.url), hook('audit', audit.url)],
        ...UPSTREAM,
        accounts: [{ name: 'prod', secrets: [PROD], ...UPSTREAM }],
        reconcileInterval: '0',
      },
      // A minute after the release stopped, as an upgrade follows it (and within the release's retention).
      { clock: new ManualClock(release.stoppedAt + 60_000) },
    );

    // What the release had in flight goes out once, as default's: the bare id, boxrelayaccount default.
    expect(sent(await alerts.receivedAtLeast(OLD_IDS.length))).toEqual(OLD_IDS.map((id) => [id, 'default']));
    expect(JSON.parse(alerts.requests[0]!.body)).toMatchObject({ source: 'sandbox', boxrelayaccount: 'default' });

    // The store's counts: the release's three events and two boxes are default's, prod has none.
    const accounts = await admin(t, '/admin/accounts');
    expect(accounts.body.accounts).toEqual([
      expect.objectContaining({ name: 'default', secrets: 2, events: 3, boxes: 2, reconcile: { running: false, last: expect.objectContaining({ id: release.reconcileRunId }) } }),
      { name: 'prod', endpoint: '/webhooks/prod', secrets: 1, lastDeliveryAt: null, events: 0, boxes: 0, reconcile: { running: false, last: null } },
    ]);
    expect(Date.parse(accounts.body.accounts[0].lastDeliveryAt)).toBeLessThan(release.stoppedAt);
    // The run the release's `boxrelay reconcile` stored is default's last run.
    expect((await admin(t, '/admin/reconcile')).body).toMatchObject({
      running: false,
      last: { id: release.reconcileRunId, outcome: 'succeeded', boxesListed: 2 },
      accounts: { prod: { running: false, last: null } },
    });

    // The boxes read as default's, with the release's states; prod has none of them.
    expect((await admin(t, `/admin/boxes/${FIRST.boxId}`)).body.box).toMatchObject({ id: FIRST.boxId, account: 'default', state: 'error', lastEventId: OLD_IDS[1] });
    const boxesOf = async (account: string) => (await admin(t, `/admin/boxes?account=${account}`)).body.boxes.map((b: { id: string; account: string; state: string }) => [b.id, b.account, b.state]);
    expect(await boxesOf('default')).toEqual([
      ['bx_release_1', 'default', 'error'],
      ['bx_release_2', 'default', 'ready'],
    ]);
    expect(await boxesOf('prod')).toEqual([]);

    // The Sandbox Service sending the release's first delivery again: a duplicate at /webhooks, a new event at prod's endpoint.
    expect((await post(t, '/webhooks', { ...FIRST, secret: SECRET })).body).toEqual({ ok: true, id: FIRST.id, duplicate: true });
    expect((await post(t, '/webhooks/prod', { ...FIRST, secret: PROD })).body).toEqual({ ok: true, id: FIRST.id, duplicate: false });
    // The secret the release's `boxrelay upstream register` stored is default's: accepted at /webhooks, refused at prod's.
    const signedWithStored = { boxId: 'bx_release_3', secret: release.databaseSecret };
    const accepted = await post(t, '/webhooks', signedWithStored);
    expect(accepted.body).toMatchObject({ ok: true, duplicate: false });
    expect((await post(t, '/webhooks/prod', signedWithStored)).status).toBe(401);

    // Each hook: prod's copy as prod:<id>, the new default event bare; audit nothing of the release's again.
    const after = [
      [`prod:${FIRST.id}`, 'prod'],
      [accepted.body.id, 'default'],
    ].sort();
    expect(sent((await alerts.received(OLD_IDS.length + 2)).slice(OLD_IDS.length))).toEqual(after);
    expect(sent(await audit.received(2))).toEqual(after);
    expect(await boxesOf('prod')).toEqual([['bx_release_1', 'prod', 'ready']]);
    expect((await admin(t, `/admin/boxes/${FIRST.boxId}`)).body.box).toMatchObject({ account: 'default', state: 'error', lastEventId: OLD_IDS[1] });
  });
});
