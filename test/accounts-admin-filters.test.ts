import request from 'supertest';
import { describe, expect, it } from 'vitest';
import { engines } from './support/databases.js';
import { adminAuth, fanoutFixture, hook, outboxRows } from './support/fanout-relay.js';
import { waitFor } from './support/fanout.js';
import type { TestRelay } from './support/relay.js';
import { SECRET, eventId, type DeliveryOptions } from './support/sign.js';

const PROD = 'whsec_cHJvZC1hZG1pbi1zZWNyZXQtMDEyMzQ1Njc4OWFi';
const STAGING = 'whsec_c3RhZ2luZy1hZG1pbi1zZWNyZXQtMDEyMzQ1Njc4';
const SECRETS: Record<string, string> = { default: SECRET, prod: PROD, staging: STAGING };
const ACCOUNTS = ['default', 'prod', 'staging'];

interface Row {
  id: string;
  account: string;
}

for (const engine of engines) {
  describe(`the admin API by account (contract section 21) on ${engine.name}`, () => {
    const { server, relay } = fanoutFixture();

    /** A relay with `prod` and `staging` beside `default`, and a hook that refuses every event (a dead letter each). */
    const start = async () => {
      const picky = await server(() => 422);
      return relay({
        database: await engine.migratedUrl(),
        accounts: [
          { name: 'prod', secrets: [PROD] },
          { name: 'staging', secrets: [STAGING] },
        ],
        hooks: [hook('picky', picky.url)],
      });
    };
    /** One delivery to an account's endpoint, signed with its secret. */
    const post = async (t: TestRelay, account: string, options: Partial<DeliveryOptions> = {}) => {
      const response = await t.postTo(account, SECRETS[account] as string, options);
      expect(response.status, response.text).toBe(200);
      return response.deliveryId;
    };
    /** The same delivery id and box id received by every account: three events, three boxes. */
    const receiveEverywhere = async (t: TestRelay) => {
      const id = eventId();
      for (const account of ACCOUNTS) await post(t, account, { id, type: 'box.error', boxId: 'bx_shared', boxName: `ci-${account}` });
      await waitFor(async () => (await outboxRows(t, 'picky')).filter((r) => r.status === 'dead').length === 3, 'three dead letters');
      return id;
    };
    const get = (t: TestRelay, path: string) => request(t.relay.internalApp).get(path).set(adminAuth);
    const accountsOf = (rows: Row[]) => rows.map((row) => row.account).sort();
    const expectRefusal = (response: request.Response, status: number, code: string) => {
      expect([response.status, response.body.code], response.text).toEqual([status, code]);
    };

    it("lists events and boxes under their account with the upstream's ids, and filters by account=", async () => {
      const t = await start();
      const id = await receiveEverywhere(t);

      // box.error: not the dead letters' operator events.
      const events = (await get(t, '/admin/events?type=box.error')).body.events as (Row & { subject: string; source: string })[];
      expect(events.map((e) => [e.account, e.id, e.subject]).sort()).toEqual(ACCOUNTS.map((account) => [account, id, 'bx_shared']));
      for (const account of ACCOUNTS) {
        const only = (await get(t, `/admin/events?type=box.error&account=${account}`)).body.events as Row[];
        expect(only.map((e) => [e.account, e.id])).toEqual([[account, id]]);
      }
      expect(events.find((e) => e.account === 'prod')?.source).toBe('sandbox/prod');

      const boxes = (await get(t, '/admin/boxes')).body.boxes as (Row & { name: string; lastEventId: string })[];
      expect(boxes.map((b) => [b.account, b.id, b.name, b.lastEventId]).sort()).toEqual(ACCOUNTS.map((account) => [account, 'bx_shared', `ci-${account}`, id]));
      for (const account of ACCOUNTS) {
        const only = (await get(t, `/admin/boxes?account=${account}`)).body.boxes as Row[];
        expect(only.map((b) => [b.account, b.id])).toEqual([[account, 'bx_shared']]);
      }

      // A box id given without account= is that box in every account; with it, in that one.
      expect(accountsOf((await get(t, '/admin/events?type=box.error&boxId=bx_shared')).body.events)).toEqual(ACCOUNTS);
      expect(accountsOf((await get(t, '/admin/events?type=box.error&boxId=bx_shared&account=staging')).body.events)).toEqual(['staging']);
      // The search reads the box's own id, not the account's prefix of its key.
      expect((await get(t, '/admin/boxes?q=prod:bx')).body.boxes).toEqual([]);
      expect(accountsOf((await get(t, '/admin/boxes?q=shared&account=prod')).body.boxes)).toEqual(['prod']);
      expect(accountsOf((await get(t, '/admin/boxes?q=ci-prod')).body.boxes)).toEqual(['prod']);
    });

    it('never lists a staging event or box under account=prod, across pages', async () => {
      const t = await start();
      for (let i = 0; i < 4; i++) {
        await post(t, 'staging', { boxId: `bx_${i}` });
        await post(t, 'prod', { boxId: `bx_${i}` });
        t.clock.advance(1000);
      }
      await waitFor(async () => (await outboxRows(t, 'picky')).filter((r) => r.status === 'dead').length === 8, 'eight dead letters');
      const walk = async (path: string, key: 'events' | 'boxes') => {
        const rows: Row[] = [];
        let cursor: string | null = null;
        do {
          const response = await get(t, `${path}&limit=3${cursor === null ? '' : `&cursor=${cursor}`}`);
          expect(response.status, response.text).toBe(200);
          rows.push(...(response.body[key] as Row[]));
          cursor = response.body.nextCursor;
        } while (cursor !== null);
        return rows;
      };
      // box.ready: not the dead letters' operator events.
      expect(accountsOf(await walk('/admin/events?type=box.ready&account=prod', 'events'))).toEqual(Array(4).fill('prod'));
      expect(accountsOf(await walk('/admin/boxes?account=prod', 'boxes'))).toEqual(Array(4).fill('prod'));
      expect(accountsOf(await walk('/admin/events?type=box.ready&account=staging', 'events'))).toEqual(Array(4).fill('staging'));
      expect(accountsOf(await walk('/admin/events?type=box.ready&account=default', 'events'))).toEqual([]);
    });

    it('reads one event, its attempts and bodies, and one box, by id and account= (default `default`)', async () => {
      const t = await start();
      const id = await receiveEverywhere(t);
      for (const account of ACCOUNTS) {
        const query = account === 'default' ? '' : `?account=${account}`;
        const one = await get(t, `/admin/events/${id}${query}`);
        expect([one.status, one.body.event.account, one.body.event.id, one.body.event.data.box.name]).toEqual([200, account, id, `ci-${account}`]);
        expect(one.body.deliveries).toMatchObject([{ sink: 'picky', status: 'dead_lettered' }]);
        const byQuery = await get(t, `/admin/events/?id=${id}${query.replace('?', '&')}`);
        expect(byQuery.body.event.account).toBe(account);
        const attempts = await get(t, `/admin/events/${id}/attempts${query}`);
        expect(attempts.body.attempts).toMatchObject([{ sink: 'picky', outcome: 'dead_lettered' }]);
        expect((await get(t, `/admin/events/${id}/bodies${query}`)).status).toBe(200);
        const box = await get(t, `/admin/boxes/bx_shared${query}`);
        expect([box.status, box.body.box.account, box.body.box.name]).toEqual([200, account, `ci-${account}`]);
      }
      // An id of one account is not found under another, nor by the store's key under `default`.
      await post(t, 'prod', { id: 'evt_onlyprod', boxId: 'bx_onlyprod' });
      expectRefusal(await get(t, '/admin/events/evt_onlyprod?account=staging'), 404, 'not_found');
      expectRefusal(await get(t, '/admin/events/evt_onlyprod'), 404, 'not_found');
      expectRefusal(await get(t, '/admin/events/prod:evt_onlyprod'), 404, 'not_found');
      expectRefusal(await get(t, '/admin/events/evt_onlyprod/attempts?account=staging'), 404, 'not_found');
      expectRefusal(await get(t, '/admin/boxes/bx_onlyprod'), 404, 'not_found');
      expectRefusal(await get(t, '/admin/boxes/prod:bx_onlyprod'), 404, 'not_found');
      expect((await get(t, '/admin/boxes/bx_onlyprod?account=prod')).status).toBe(200);
    });

    it('refuses an account= that is no account 400 invalid_request on every route that takes one, changing nothing', async () => {
      const t = await start();
      const id = await receiveEverywhere(t);
      for (const path of [
        '/admin/events?account=nope',
        '/admin/events?account=Prod',
        '/admin/boxes?account=nope',
        `/admin/events/${id}?account=nope`,
        `/admin/events/${id}/attempts?account=nope`,
        `/admin/events/${id}/bodies?account=nope`,
        '/admin/boxes/bx_shared?account=nope',
        `/admin/audit?eventId=${id}&account=nope`,
        '/admin/events?account=prod&account=staging',
      ]) {
        expectRefusal(await get(t, path), 400, 'invalid_request');
      }
      expectRefusal(await request(t.relay.internalApp).delete('/admin/boxes/bx_shared?account=nope').set(adminAuth), 400, 'invalid_request');
      expectRefusal(await request(t.relay.internalApp).post(`/admin/events/${id}/resend?account=nope`).set(adminAuth).send({ sink: 'picky' }), 400, 'invalid_request');
      expect((await get(t, '/admin/boxes')).body.boxes).toHaveLength(3);
      expect((await get(t, '/admin/audit')).body.audit).toEqual([]);
      expect((await outboxRows(t, 'picky')).map((r) => r.status)).toEqual(['dead', 'dead', 'dead']);
    });

    it("forgets and resends one account's box and event only, each audited under the account's key", async () => {
      const t = await start();
      const id = await receiveEverywhere(t);
      const forget = await request(t.relay.internalApp).delete('/admin/boxes/bx_shared?account=prod').set(adminAuth);
      expect(forget.status).toBe(204);
      expect(accountsOf((await get(t, '/admin/boxes')).body.boxes)).toEqual(['default', 'staging']);
      expectRefusal(await request(t.relay.internalApp).delete('/admin/boxes/bx_shared?account=prod').set(adminAuth), 404, 'not_found');

      const resend = await request(t.relay.internalApp).post(`/admin/events/${id}/resend?account=staging`).set(adminAuth).send({ sink: 'picky' });
      expect(resend.status, resend.text).toBe(202);
      const rows = await outboxRows(t, 'picky');
      expect(rows.find((r) => r.delivery_id === `staging:${id}`)?.status).toBe('pending');
      expect(rows.filter((r) => r.delivery_id !== `staging:${id}`).map((r) => r.status)).toEqual(['dead', 'dead']);

      const audit = (await get(t, '/admin/audit')).body.audit as { action: string; target: string; detail: unknown }[];
      expect(audit.map((a) => [a.action, a.target, a.detail])).toEqual([
        ['resend', `staging:${id}`, { sink: 'picky' }],
        ['forget', 'prod:bx_shared', { boxId: 'bx_shared', account: 'prod' }],
      ]);
    });

    it('shows dead letters and failed attempts under their event account, which finds the event and its audit', async () => {
      const t = await start();
      const id = await receiveEverywhere(t);
      const deadLetters = (await get(t, '/admin/dead-letters')).body.deadLetters as (Row & { eventId: string })[];
      expect(deadLetters.map((d) => [d.account, d.eventId]).sort()).toEqual(ACCOUNTS.map((account) => [account, id]));
      const failed = (await get(t, '/admin/sinks/picky/failed-attempts')).body.attempts as (Row & { eventId: string })[];
      expect(failed.map((a) => [a.account, a.eventId]).sort()).toEqual(ACCOUNTS.map((account) => [account, id]));

      const prodLetter = deadLetters.find((d) => d.account === 'prod') as Row & { eventId: string; id: number };
      expect((await get(t, `/admin/events/${prodLetter.eventId}?account=${prodLetter.account}`)).body.event.data.box.name).toBe('ci-prod');
      expect((await request(t.relay.internalApp).post(`/admin/dead-letters/${prodLetter.id}/retry`).set(adminAuth)).status).toBe(202);
      expect((await get(t, `/admin/audit?eventId=${id}&account=prod`)).body.audit).toMatchObject([{ action: 'retry', target: String(prodLetter.id) }]);
      expect((await get(t, `/admin/audit?eventId=${id}`)).body.audit).toEqual([]);
      expect((await get(t, `/admin/audit?eventId=${id}&account=staging`)).body.audit).toEqual([]);
    });
  });
}
