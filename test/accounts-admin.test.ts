import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import BetterSqlite3 from 'better-sqlite3';
import { Kysely, SqliteDialect } from 'kysely';
import request from 'supertest';
import { afterEach, describe, expect, it } from 'vitest';
import { openMigrated } from '../src/store/engines/migrate.js';
import { accountTotals } from '../src/store/state/account-totals.js';
import { sortsTextBytewise } from '../src/store/engines/text-order.js';
import type { Schema } from '../src/store/schema.js';
import { ADMIN_TOKEN, adminClient } from './support/admin.js';
import { engines, sqliteFile } from './support/databases.js';
import { testRelay, type TestRelay } from './support/relay.js';
import { SECRET, delivery, eventId, sendRaw, type DeliveryOptions } from './support/sign.js';

const PROD = 'whsec_cHJvZC1yZWNlaXZlci1zZWNyZXQtMDEyMzQ1Njc=';
const PROD_NEXT = 'whsec_cHJvZC1uZXh0LXJlY2VpdmVyLXNlY3JldC0wMTI=';
const PROD_EU = 'whsec_cHJvZC1ldS1yZWNlaXZlci1zZWNyZXQtMDEyMzQ=';
const API_KEY = 'box_0123456789abcdef0123456789abcdef';
const iso = (ms: number) => new Date(ms).toISOString();

for (const engine of engines) {
  describe(`GET /admin/accounts (contract section 21) on ${engine.name}`, () => {
    let t: TestRelay;
    afterEach(() => t.close());

    const start = async (overrides: Record<string, unknown> = {}) => {
      t = await testRelay({
        database: await engine.url(),
        adminToken: ADMIN_TOKEN,
        secrets: [SECRET],
        accounts: [
          // `prod-eu` sorts right beside `prod`: their keys must not be counted as each other's.
          { name: 'prod', secrets: [PROD, PROD_NEXT], upstreamBaseUrl: 'http://127.0.0.1:9/v1', upstreamApiKey: API_KEY },
          { name: 'prod-eu', secrets: [PROD_EU] },
        ],
        ...overrides,
      });
    };
    const post = async (path: string, options: Partial<DeliveryOptions>) => {
      const d = delivery({ timestamp: t.clock.seconds, ...options });
      const response = await sendRaw(request(t.relay.publicApp).post(path).set(d.headers), d.body);
      expect(response.status).toBe(200);
    };

    it('lists each account with its endpoint, secret count, stored events, boxes, newest event and reconciliation; no secret shows', async () => {
      await start();
      const admin = adminClient(t);
      const first = t.clock.now();
      const shared = eventId();
      // One delivery id and one box id under every account: three events and three boxes.
      await post('/webhooks', { id: shared, boxId: 'bx_1', secret: SECRET });
      await post('/webhooks/prod', { id: shared, boxId: 'bx_1', secret: PROD });
      await post('/webhooks/prod-eu', { id: shared, boxId: 'bx_1', secret: PROD_EU });
      t.clock.advance(60_000);
      await post('/webhooks', { boxId: 'bx_2', secret: SECRET });
      await post('/webhooks/prod', { boxId: 'bx_1', type: 'box.error', secret: PROD });
      t.clock.advance(60_000);
      await post('/webhooks/prod', { boxId: 'bx_3', secret: PROD });

      const response = await admin.get('/admin/accounts');
      expect(response.status).toBe(200);
      expect(response.body).toEqual({
        ok: true,
        accounts: [
          { name: 'default', endpoint: '/webhooks', secrets: 1, lastDeliveryAt: iso(first + 60_000), events: 2, boxes: 2, reconcile: null },
          // prod has API credentials: its reconciliation, which has not run.
          { name: 'prod', endpoint: '/webhooks/prod', secrets: 2, lastDeliveryAt: iso(first + 120_000), events: 3, boxes: 2, reconcile: { running: false, last: null } },
          { name: 'prod-eu', endpoint: '/webhooks/prod-eu', secrets: 1, lastDeliveryAt: iso(first), events: 1, boxes: 1, reconcile: null },
        ],
      });
      for (const secret of [SECRET, PROD, PROD_NEXT, PROD_EU, API_KEY, 'whsec_']) expect(response.text).not.toContain(secret);
      admin.expectNoSecrets();
    });

    it('an account with nothing stored reads zero and null; `default` without a secret is not listed', async () => {
      await start({ secrets: [] });
      const response = await adminClient(t).get('/admin/accounts');
      expect(response.body).toEqual({
        ok: true,
        accounts: [
          { name: 'prod', endpoint: '/webhooks/prod', secrets: 2, lastDeliveryAt: null, events: 0, boxes: 0, reconcile: { running: false, last: null } },
          { name: 'prod-eu', endpoint: '/webhooks/prod-eu', secrets: 1, lastDeliveryAt: null, events: 0, boxes: 0, reconcile: null },
        ],
      });
    });

    it('lists `default` alone with 0 once its secrets ran out: without further accounts its /webhooks is still served (401)', async () => {
      const secretsFile = join(mkdtempSync(join(tmpdir(), 'boxrelay-secrets-')), 'secrets');
      // An hour after the test clock's start.
      const expiry = '2026-11-21T11:00:00.000Z';
      writeFileSync(secretsFile, `${SECRET} ${expiry}\n`);
      await start({ secrets: [], secretsFile, accounts: [] });
      t.clock.set(Date.parse(expiry) + 1);
      expect((await t.post()).status).toBe(401);
      expect((await adminClient(t).get('/admin/accounts')).body.accounts).toEqual([
        { name: 'default', endpoint: '/webhooks', secrets: 0, lastDeliveryAt: null, events: 0, boxes: 0, reconcile: null },
      ]);
    });

    it('counts the same by range and by pattern, whichever order the database gives text', async () => {
      await start();
      await post('/webhooks', { boxId: 'bx_1', secret: SECRET });
      await post('/webhooks/prod', { boxId: 'bx_1', secret: PROD });
      await post('/webhooks/prod-eu', { boxId: 'bx_1', secret: PROD_EU });
      const kysely = t.relay.store.database.kysely;
      // The test databases sort text bytewise (SQLite always; the PostgreSQL test database is C.UTF-8).
      expect(await sortsTextBytewise(t.relay.store.database)).toBe(true);
      for (const name of ['default', 'prod', 'prod-eu', 'staging']) {
        expect(await accountTotals(kysely, name, false)).toEqual(await accountTotals(kysely, name, true));
      }
      expect((await accountTotals(kysely, 'prod', true)).events).toBe(1);
    });

    it('answers other methods 405 and no token 401', async () => {
      await start();
      expect((await adminClient(t).call('post', '/admin/accounts')).status).toBe(405);
      expect((await request(t.relay.internalApp).get('/admin/accounts')).status).toBe(401);
    });
  });
}

describe('the accounts counts on a migrated SQLite database', () => {
  it('read only the index: a named account a range of the keys, `default` its keys, the newest time from the box index', async () => {
    const file = sqliteFile();
    await (await openMigrated({ url: file })).database.close();
    const sqlite = new BetterSqlite3(file);
    const plans: string[] = [];
    const kysely = new Kysely<Schema>({
      dialect: new SqliteDialect({ database: sqlite }),
      log: (event) => {
        if (event.level !== 'query') return;
        const rows = sqlite.prepare(`EXPLAIN QUERY PLAN ${event.query.sql}`).all(...event.query.parameters) as { detail: string }[];
        plans.push(rows.map((r) => r.detail).join('; '));
      },
    });
    try {
      await accountTotals(kysely, 'prod', true);
      expect(plans).toEqual([
        expect.stringMatching(/^SEARCH deliveries USING COVERING INDEX sqlite_autoindex_deliveries_1 \(id>\? AND id<\?\)$/),
        expect.stringMatching(/^SEARCH boxes USING COVERING INDEX sqlite_autoindex_boxes_1 \(id>\? AND id<\?\)$/),
        expect.stringMatching(/^SEARCH deliveries USING COVERING INDEX deliveries_box_id \(box_id>\? AND box_id<\?\)$/),
      ]);
      plans.length = 0;
      await accountTotals(kysely, 'default', true);
      expect(plans).toEqual([
        expect.stringMatching(/^SCAN deliveries USING COVERING INDEX sqlite_autoindex_deliveries_1$/),
        expect.stringMatching(/^SCAN boxes USING COVERING INDEX sqlite_autoindex_boxes_1$/),
        expect.stringMatching(/^(SCAN|SEARCH) deliveries USING COVERING INDEX deliveries_box_id\b/),
      ]);
    } finally {
      await kysely.destroy();
    }
  });
});
