import { writeFileSync } from 'node:fs';
import request from 'supertest';
import { afterEach, describe, expect, it } from 'vitest';
import { engines, sqliteFile } from './support/databases.js';
import { loadConfig } from '../src/config/load.js';
import { problemsOf } from './support/config-files.js';
import { startFakeSandbox } from './support/fake-sandbox.js';
import { pendingCount } from './support/fanout-relay.js';
import { testRelay, type TestRelay } from './support/relay.js';
import { SECRET, delivery, eventId, sendRaw, type DeliveryOptions } from './support/sign.js';

const PROD = 'whsec_cHJvZC1yZWNlaXZlci1zZWNyZXQtMDEyMzQ1Njc=';
const STAGING = 'whsec_c3RhZ2luZy1yZWNlaXZlci1zZWNyZXQtMDEyMzQ=';

for (const engine of engines) {
  describe(`several accounts (contract section 21): POST /webhooks/<name> on ${engine.name}`, () => {
    let t: TestRelay;
    afterEach(() => t.close());

    const start = async (overrides: Record<string, unknown> = {}) => {
      t = await testRelay({
        database: await engine.migratedUrl(),
        secrets: [SECRET],
        accounts: [
          { name: 'prod', secrets: [PROD] },
          { name: 'staging', secrets: [STAGING] },
        ],
        hooks: [{ name: 'alerts', url: 'http://127.0.0.1:9/x' }],
        ...overrides,
      });
    };
    const post = (path: string, options: Partial<DeliveryOptions> = {}) => {
      const d = delivery({ timestamp: t.clock.seconds, ...options });
      return sendRaw(request(t.relay.publicApp).post(path).set(d.headers), d.body);
    };
    const rows = () => t.relay.store.database.kysely.selectFrom('deliveries').select(['id', 'box_id']).orderBy('id').execute();
    const boxes = () => t.relay.store.database.kysely.selectFrom('boxes').select(['id', 'state', 'last_event_id']).orderBy('id').execute();
    const nothingStored = async () => {
      expect(await rows()).toEqual([]);
      expect(await boxes()).toEqual([]);
      expect(await pendingCount(t, 'alerts')).toBe(0);
    };
    const expectRefusal = (response: request.Response, status: number, code: string) => {
      expect(response.status).toBe(status);
      expect(response.body).toEqual({ ok: false, code, message: expect.any(String), requestId: expect.stringMatching(/^req_/) });
    };

    it("verifies each account's deliveries with its own secrets only: another account's secret is invalid_signature, nothing stored", async () => {
      await start();
      expectRefusal(await post('/webhooks/prod', { secret: STAGING }), 401, 'invalid_signature');
      expectRefusal(await post('/webhooks/staging', { secret: PROD }), 401, 'invalid_signature');
      expectRefusal(await post('/webhooks/prod', { secret: SECRET }), 401, 'invalid_signature');
      expectRefusal(await post('/webhooks', { secret: PROD }), 401, 'invalid_signature');
      await nothingStored();
      const accepted = await post('/webhooks/prod', { secret: PROD });
      expect(accepted.status).toBe(200);
      expect(accepted.body).toMatchObject({ ok: true, duplicate: false });
      expect(await pendingCount(t, 'alerts')).toBe(1);
    });

    it('answers a name that is no account 404 not_found before any HMAC work, and other methods 405 only where an account is', async () => {
      await start();
      // Headers missing and a body over the limit: an endpoint would answer 400 first; no endpoint, 404.
      const unknown = await request(t.relay.publicApp).post('/webhooks/nope').send('x'.repeat(t.config.maxBodyBytes + 1));
      expectRefusal(unknown, 404, 'not_found');
      for (const path of ['/webhooks/default', '/webhooks/Prod', '/webhooks/%70rod', '/webhooks/prod/', '/webhooks/prod/x', '/webhooks/']) {
        expectRefusal(await post(path, { secret: PROD }), 404, 'not_found');
      }
      expectRefusal(await request(t.relay.publicApp).get('/webhooks/prod'), 405, 'method_not_allowed');
      expectRefusal(await request(t.relay.publicApp).get('/webhooks/nope'), 404, 'not_found');
      // The section 2 table holds at an account's endpoint.
      expectRefusal(await request(t.relay.publicApp).post('/webhooks/prod').send('{}'), 400, 'missing_header');
      expectRefusal(await post('/webhooks/prod', { secret: PROD, timestamp: t.clock.seconds - 301 }), 401, 'timestamp_out_of_window');
      expectRefusal(await post('/webhooks/prod', { secret: PROD, body: '{"id":1}' }), 400, 'invalid_event');
      await nothingStored();
    });

    it('dedups per account: one delivery id under three accounts is three events, each fanned out once; the same box is three boxes', async () => {
      await start();
      const id = eventId();
      const answers = [];
      for (const [path, secret, state] of [['/webhooks', SECRET, 'ready'], ['/webhooks/prod', PROD, 'error'], ['/webhooks/staging', STAGING, 'archived']] as const) {
        const type = state === 'ready' ? 'box.ready' : state === 'error' ? 'box.error' : 'box.archived';
        answers.push((await post(path, { id, secret, boxId: 'bx_same', type })).body);
        answers.push((await post(path, { id, secret, boxId: 'bx_same', type })).body);
      }
      expect(answers).toEqual([
        { ok: true, id, duplicate: false },
        { ok: true, id, duplicate: true },
        { ok: true, id, duplicate: false },
        { ok: true, id, duplicate: true },
        { ok: true, id, duplicate: false },
        { ok: true, id, duplicate: true },
      ]);
      expect(await rows()).toEqual([
        { id, box_id: 'bx_same' },
        { id: `prod:${id}`, box_id: 'prod:bx_same' },
        { id: `staging:${id}`, box_id: 'staging:bx_same' },
      ]);
      expect(await pendingCount(t, 'alerts')).toBe(3);
      // A staging delivery changed neither the production box nor the default one.
      expect(await boxes()).toEqual([
        { id: 'bx_same', state: 'ready', last_event_id: id },
        { id: 'prod:bx_same', state: 'error', last_event_id: `prod:${id}` },
        { id: 'staging:bx_same', state: 'archived', last_event_id: `staging:${id}` },
      ]);
    });

    it("a reconciliation run of the default account forgets none of another account's boxes", async () => {
      const upstream = await startFakeSandbox();
      try {
        await start({ upstreamBaseUrl: upstream.baseUrl, upstreamApiKey: upstream.apiKey, reconcileInterval: '0', reconcileMaxRps: 1000 });
        const past = new Date(t.clock.now() - 30 * 60_000).toISOString();
        for (const [path, secret] of [['/webhooks', SECRET], ['/webhooks/prod', PROD]] as const) {
          expect((await post(path, { secret, boxId: 'bx_gone', type: 'box.error', createdAt: past })).status).toBe(200);
        }
        // The default account's upstream lists no box: its bx_gone was deleted there, prod's is prod's.
        const run = await (await t.relay.reconciler!.start({ dryRun: false })).finished;
        expect(run).toMatchObject({ outcome: 'succeeded', boxesListed: 0, boxesForgotten: 1 });
        expect((await boxes()).map((box) => box.id)).toEqual(['prod:bx_gone']);
      } finally {
        await upstream.close();
      }
    });

    it('with only named accounts and no section 1 secret, /webhooks answers 404 and the accounts still serve', async () => {
      await start({ secrets: [] });
      expectRefusal(await post('/webhooks', { secret: SECRET }), 404, 'not_found');
      expectRefusal(await request(t.relay.publicApp).get('/webhooks'), 404, 'not_found');
      await nothingStored();
      expect((await post('/webhooks/staging', { secret: STAGING })).status).toBe(200);
    });
  });
}

describe('an account secrets file', () => {
  let t: TestRelay;
  afterEach(() => t.close());

  it('is read at start and reloaded as section 1 says, verifying only its account', async () => {
    const file = `${sqliteFile()}.secrets`;
    writeFileSync(file, `${STAGING}\n`);
    t = await testRelay({ accounts: [{ name: 'staging', secretsFile: file }] });
    const post = (path: string, secret: string) => {
      const d = delivery({ timestamp: t.clock.seconds, secret });
      return sendRaw(request(t.relay.publicApp).post(path).set(d.headers), d.body);
    };
    expect((await post('/webhooks/staging', STAGING)).status).toBe(200);
    const next = 'whsec_bmV4dC1zdGFnaW5nLXNlY3JldC0wMTIzNDU2Nzg=';
    writeFileSync(file, `${next}\n`);
    // What the relay's timer does every BOXRELAY_SECRETS_RELOAD_MS once started.
    expect(t.relay.accountSecretsFiles.map((secrets) => secrets.refresh())).toEqual([true]);
    expect((await post('/webhooks/staging', next)).status).toBe(200);
    expect((await post('/webhooks/staging', STAGING)).status).toBe(401);
    expect((await post('/webhooks', next)).status).toBe(401);
  });
});

describe('hooks by account', () => {
  let t: TestRelay;
  afterEach(() => t.close());

  it('a hook listing accounts gets only theirs, and a CEL filter reads event.boxrelayaccount', async () => {
    t = await testRelay({
      accounts: [
        { name: 'prod', secrets: [PROD] },
        { name: 'staging', secrets: [STAGING] },
      ],
      hooks: [
        { name: 'every', url: 'http://127.0.0.1:9/a' },
        { name: 'prod-only', url: 'http://127.0.0.1:9/b', accounts: ['prod'] },
        { name: 'default-and-staging', url: 'http://127.0.0.1:9/c', accounts: ['default', 'staging'] },
        { name: 'staging-by-cel', url: 'http://127.0.0.1:9/d', filter: 'has(event.boxrelayaccount) && event.boxrelayaccount == "staging"' },
        // `default` is named on its own events too (contract section 21, "What receivers see").
        { name: 'default-by-cel', url: 'http://127.0.0.1:9/e', filter: 'event.boxrelayaccount == "default"' },
      ],
    });
    for (const [path, secret] of [['/webhooks', SECRET], ['/webhooks/prod', PROD], ['/webhooks/staging', STAGING]] as const) {
      const d = delivery({ timestamp: t.clock.seconds, secret });
      expect((await sendRaw(request(t.relay.publicApp).post(path).set(d.headers), d.body)).status).toBe(200);
    }
    const hooks = ['every', 'prod-only', 'default-and-staging', 'staging-by-cel', 'default-by-cel'];
    const pending = Object.fromEntries(await Promise.all(hooks.map(async (hook) => [hook, await pendingCount(t, hook)])));
    expect(pending).toEqual({ every: 3, 'prod-only': 1, 'default-and-staging': 2, 'staging-by-cel': 1, 'default-by-cel': 1 });
    expect(t.logs.entries().filter((entry) => Number(entry.level) >= 40)).toEqual([]);
  });

  it('refuses a hook that names no account, one line per name', () => {
    const config = { accounts: [{ name: 'prod', secrets: [PROD] }], hooks: [{ name: 'h', url: 'https://x.example', accounts: ['prod', 'prd', 'Default'] }] };
    expect(problemsOf(() => loadConfig({ env: { BOXRELAY_CONFIG: '/c.json' }, readFile: () => JSON.stringify(config) }))).toEqual([
      'hooks.0.accounts: hook h: no account is named "prd" (accounts: default, prod)',
      'hooks.0.accounts: hook h: no account is named "Default" (accounts: default, prod)',
    ]);
  });
});
