import { writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import request from 'supertest';
import { beforeAll, describe, expect, it } from 'vitest';
import { ReconcileInProgressError } from '../src/errors.js';
import type { Run } from '../src/store/state/reconcile-runs.js';
import { openMigrated } from '../src/store/engines/migrate.js';
import { engines, sqliteFile } from './support/databases.js';
import { startFakeSandbox, type FakeSandbox } from './support/fake-sandbox.js';
import { adminAuth, allDelivered, fanoutFixture, hook, metricValue } from './support/fanout-relay.js';
import { waitFor } from './support/fanout.js';
import { requireBuild, runCli } from './support/process.js';
import { fastUpstream, gate, setWatchStart } from './support/reconcile.js';
import type { TestRelay } from './support/relay.js';
import { SECRET, delivery, eventId, sendRaw } from './support/sign.js';
import { HandTimers } from './support/timers.js';

const PROD = 'whsec_cHJvZC1yZWNlaXZlci1zZWNyZXQtMDEyMzQ1Njc=';
const STAGING = 'whsec_c3RhZ2luZy1yZWNlaXZlci1zZWNyZXQtMDEyMzQ=';
const MINUTE = 60_000;
const iso = (ms: number) => new Date(ms).toISOString();

/** A history record in the delivery payload's shape (the upstream document's event). */
function historyRecord(boxId: string, type: 'box.ready' | 'box.error' | 'box.archived', createdAt: number, previousState: string) {
  const state = type === 'box.error' ? 'error' : type === 'box.archived' ? 'archived' : 'ready';
  return { id: eventId(), type, createdAt: iso(createdAt), data: { box: { id: boxId, name: `n-${boxId}` }, previousState, state } };
}

/** Each account's API credentials: the fake upstream it reads, with its own key. */
const accountsOn = (prod: FakeSandbox, staging?: FakeSandbox) => [
  { name: 'prod', secrets: [PROD], upstreamBaseUrl: prod.baseUrl, upstreamApiKey: prod.apiKey },
  { name: 'staging', secrets: [STAGING], ...(staging ? { upstreamBaseUrl: staging.baseUrl, upstreamApiKey: staging.apiKey } : {}) },
];

for (const engine of engines) {
  describe(`reconciliation per account (contract section 21) on ${engine.name}`, () => {
    const { defer, server, relay } = fanoutFixture();

    async function setup(overrides: Record<string, unknown> = {}) {
      const prod = await startFakeSandbox();
      defer(() => prod.close());
      const staging = await startFakeSandbox();
      defer(() => staging.close());
      const receiver = await server();
      const t = await relay(
        {
          database: await engine.url(),
          secrets: [SECRET],
          accounts: accountsOn(prod, staging),
          reconcileInterval: '0',
          reconcileMaxRps: 1000,
          hooks: [hook('all', receiver.url, { events: ['*'] })],
          ...overrides,
        },
        { reconcile: { upstream: fastUpstream } },
      );
      await setWatchStart(t, t.clock.now() - 60 * MINUTE);
      return { prod, staging, receiver, t };
    }
    const post = async (t: TestRelay, path: string, secret: string, options: { boxId: string; type: string; createdAt: number }) => {
      const d = delivery({ timestamp: t.clock.seconds, secret, boxId: options.boxId, type: options.type, createdAt: iso(options.createdAt) });
      expect((await sendRaw(request(t.relay.publicApp).post(path).set(d.headers), d.body)).status).toBe(200);
      return d.id;
    };
    const kysely = (t: TestRelay) => t.relay.store.database.kysely;
    const storedIds = async (t: TestRelay) =>
      (await kysely(t).selectFrom('deliveries').select(['id', 'origin']).orderBy('id').execute()).filter((r) => r.origin !== 'operator').map((r) => r.id);
    const boxes = async (t: TestRelay) => kysely(t).selectFrom('boxes').select(['id', 'state']).orderBy('id').execute();
    const run = async (t: TestRelay, account: string, dryRun = false): Promise<Run> => (await t.relay.reconcilers.get(account)!.start({ dryRun })).finished;

    it("runs each account against its own upstream with its own key, storing under its keys and touching no other account's events or boxes", async () => {
      const { prod, staging, receiver, t } = await setup();
      const now = t.clock.now();
      // The same box ids under each account, each with a box the account's upstream no longer lists.
      const held: string[] = [];
      for (const [path, secret, prefix] of [['/webhooks', SECRET, ''], ['/webhooks/prod', PROD, 'prod:'], ['/webhooks/staging', STAGING, 'staging:']] as const) {
        held.push(`${prefix}${await post(t, path, secret, { boxId: 'bx_1', type: 'box.ready', createdAt: now - 40 * MINUTE })}`);
        held.push(`${prefix}${await post(t, path, secret, { boxId: 'bx_gone', type: 'box.error', createdAt: now - 30 * MINUTE })}`);
      }
      const prodError = historyRecord('bx_1', 'box.error', now - 10 * MINUTE, 'ready');
      prod.setBox({ id: 'bx_1', name: 'n-bx_1', state: 'error', updatedAt: prodError.createdAt });
      prod.addHistory('bx_1', prodError);
      const stagingArchived = historyRecord('bx_1', 'box.archived', now - 5 * MINUTE, 'ready');
      staging.setBox({ id: 'bx_1', name: 'n-bx_1', state: 'archived', updatedAt: stagingArchived.createdAt });
      staging.addHistory('bx_1', stagingArchived);
      staging.setBox({ id: 'bx_new', name: 'new', state: 'error', updatedAt: iso(now - 2 * MINUTE) });

      // A dry run names the upstream's ids, as the account's upstream knows them.
      expect((await run(t, 'prod', true)).actions).toEqual([
        { boxId: 'bx_1', action: 'relay-history', eventId: prodError.id, type: 'box.error' },
        { boxId: 'bx_gone', action: 'forget' },
      ]);
      expect(await run(t, 'prod')).toMatchObject({ outcome: 'succeeded', boxesListed: 1, boxesRepaired: 1, eventsFromHistory: 1, eventsSynthesized: 0, boxesForgotten: 1, error: null });
      expect(await storedIds(t)).toEqual([...held, `prod:${prodError.id}`].sort());
      expect(await boxes(t)).toEqual([
        { id: 'bx_1', state: 'ready' },
        { id: 'bx_gone', state: 'error' },
        { id: 'prod:bx_1', state: 'error' },
        { id: 'staging:bx_1', state: 'ready' },
        { id: 'staging:bx_gone', state: 'error' },
      ]);
      // Only prod's upstream was asked, always with prod's key.
      expect(staging.requests).toEqual([]);
      expect(new Set(prod.requests.map((r) => r.authorization))).toEqual(new Set([`Bearer ${prod.apiKey}`]));
      expect(prod.requests.every((r) => r.outcome === 200)).toBe(true);

      expect(await run(t, 'staging')).toMatchObject({ outcome: 'succeeded', boxesListed: 2, eventsFromHistory: 1, eventsSynthesized: 1, boxesForgotten: 1 });
      expect(new Set(staging.requests.map((r) => r.authorization))).toEqual(new Set([`Bearer ${staging.apiKey}`]));
      expect(await boxes(t)).toEqual([
        { id: 'bx_1', state: 'ready' },
        { id: 'bx_gone', state: 'error' },
        { id: 'prod:bx_1', state: 'error' },
        { id: 'staging:bx_1', state: 'archived' },
        { id: 'staging:bx_new', state: 'error' },
      ]);
      const ids = await storedIds(t);
      expect(ids).toHaveLength(9);
      expect(ids).toContain(`staging:${stagingArchived.id}`);
      expect(ids.filter((id) => id.startsWith('staging:evt_') && !held.includes(id) && id !== `staging:${stagingArchived.id}`)).toHaveLength(1);

      // Receivers dedupe the repaired events by the account's ids.
      await allDelivered(t, 'all');
      await receiver.received(9);
      const reconciled = receiver.requests.filter((r) => (JSON.parse(r.body) as { boxrelayorigin?: string }).boxrelayorigin !== undefined);
      expect(reconciled.map((r) => r.headers['webhook-id']).sort()).toEqual(ids.filter((id) => !held.includes(id)).sort());
      expect(reconciled.map((r) => (JSON.parse(r.body) as { boxrelayaccount: string }).boxrelayaccount).sort()).toEqual(['prod', 'staging', 'staging']);

      // Each account's reports are its own; `default` has no credentials and no run.
      const status = await request(t.relay.internalApp).get('/admin/reconcile').set(adminAuth);
      expect(status.status).toBe(200);
      expect(status.body).toMatchObject({
        ok: true,
        running: false,
        last: null,
        accounts: {
          prod: { running: false, last: { outcome: 'succeeded', eventsFromHistory: 1 } },
          staging: { running: false, last: { outcome: 'succeeded', eventsSynthesized: 1 } },
        },
      });
      expect(Object.keys(status.body.accounts as object)).toEqual(['prod', 'staging']);
      const accounts = (await request(t.relay.internalApp).get('/admin/accounts').set(adminAuth)).body as { accounts: { name: string; reconcile: unknown }[] };
      expect(accounts.accounts.map((a) => [a.name, a.reconcile])).toEqual([
        ['default', null],
        ['prod', status.body.accounts.prod],
        ['staging', status.body.accounts.staging],
      ]);
      expect(JSON.stringify([status.body, accounts])).not.toContain(prod.apiKey);
      expect(await kysely(t).selectFrom('reconcile_runs').select(['account', 'outcome']).orderBy('started_at').orderBy('account').execute()).toEqual([
        { account: 'prod', outcome: 'dry-run' },
        { account: 'prod', outcome: 'succeeded' },
        { account: 'staging', outcome: 'succeeded' },
      ]);
    });

    it("announces a failed run as an operator event of the account reconciled: its boxrelayaccount and receiver ids", async () => {
      const ops = await server();
      const { prod, t } = await setup({ hooks: [hook('ops', ops.url, { events: ['boxrelay.*'] })] });
      prod.inject({ kind: 'error', status: 401 });
      expect((await run(t, 'prod')).outcome).toBe('failed');
      const [announcement] = await ops.received(1);
      const event = JSON.parse(announcement!.body) as { id: string };
      expect(event).toMatchObject({ type: 'boxrelay.reconcile.failed', source: 'sandbox/boxrelay', boxrelayaccount: 'prod', data: { account: 'prod' } });
      expect(announcement!.headers['webhook-id']).toBe(`prod:${event.id}`);
    });

    it("one account's run in progress does not hold up another's; a second run of the same account is refused as ever", async () => {
      const { prod, t } = await setup();
      const hang = gate();
      defer(async () => hang.open());
      prod.inject({ kind: 'hold', until: hang.until, path: '/v1/boxes' });

      const first = await t.relay.reconcilers.get('prod')!.start({ dryRun: false });
      await waitFor(() => prod.requests.length === 1, "prod's run to ask for its box list");
      expect(await run(t, 'staging')).toMatchObject({ outcome: 'succeeded' });
      const started = await request(t.relay.internalApp).post('/admin/reconcile').set(adminAuth).send({ account: 'staging' });
      expect(started.status).toBe(202);
      await waitFor(async () => !(await t.relay.reconcilers.get('staging')!.status()).running, "staging's second run to end");

      await expect(t.relay.reconcilers.get('prod')!.start({ dryRun: false })).rejects.toBeInstanceOf(ReconcileInProgressError);
      const refused = await request(t.relay.internalApp).post('/admin/reconcile').set(adminAuth).send({ account: 'prod', dryRun: true });
      expect(refused.status).toBe(409);
      expect(refused.body.code).toBe('reconcile_in_progress');
      const status = await request(t.relay.internalApp).get('/admin/reconcile').set(adminAuth);
      expect(status.body.accounts).toMatchObject({ prod: { running: true, last: null }, staging: { running: false, last: { outcome: 'succeeded' } } });
      // Each account's lease is its own.
      expect((await kysely(t).selectFrom('leases').select('name').execute()).map((l) => l.name)).toEqual(['reconcile:prod']);

      hang.open();
      expect(await first.finished).toMatchObject({ outcome: 'succeeded' });
      expect(prod.requests.filter((r) => r.path === '/v1/boxes')).toHaveLength(1);
      expect(await kysely(t).selectFrom('leases').selectAll().execute()).toEqual([]);
    });

    it('answers an unknown account 404, an account without credentials as `default` without them, a bad body 400: nothing started or recorded', async () => {
      const prod = await startFakeSandbox();
      defer(() => prod.close());
      const t = await relay({ database: await engine.url(), secrets: [SECRET], accounts: accountsOn(prod), reconcileInterval: '0' });
      const post = (body: unknown) => request(t.relay.internalApp).post('/admin/reconcile').set(adminAuth).send(body as object);
      const expectRefusal = (response: request.Response, status: number, code: string) => {
        expect(response.status).toBe(status);
        expect(response.body).toEqual({ ok: false, code, message: expect.any(String), requestId: expect.stringMatching(/^req_/) });
      };
      expectRefusal(await post({ account: 'nope' }), 404, 'not_found');
      expectRefusal(await post({ account: 'Prod' }), 404, 'not_found');
      const staging = await post({ account: 'staging' });
      expectRefusal(staging, 409, 'reconcile_not_configured');
      expect(staging.body.message).toBe('reconciliation of account staging needs its upstreamBaseUrl and upstreamApiKey');
      const unconfiguredDefault = await post({});
      expectRefusal(unconfiguredDefault, 409, 'reconcile_not_configured');
      expect(unconfiguredDefault.body.message).toBe('reconciliation needs BOXRELAY_UPSTREAM_BASE_URL and BOXRELAY_UPSTREAM_API_KEY');
      expectRefusal(await post({ account: 5 }), 400, 'invalid_request');
      expectRefusal(await post({ account: 'prod', extra: true }), 400, 'invalid_request');
      expect(prod.requests).toEqual([]);
      expect(await kysely(t).selectFrom('reconcile_runs').selectAll().execute()).toEqual([]);
      expect(await kysely(t).selectFrom('audit').selectAll().execute()).toEqual([]);
      // With credentials for some account, the status answers; `default`'s fields say it never ran.
      expect((await request(t.relay.internalApp).get('/admin/reconcile').set(adminAuth)).body).toEqual({
        ok: true,
        running: false,
        last: null,
        accounts: { prod: { running: false, last: null } },
      });
    });
  });
}

describe('scheduled runs per account', () => {
  const { defer, relay } = fanoutFixture();

  it('plan a run for each account with credentials, each against its own upstream; the success gauge is the oldest account success', async () => {
    const upstreams = await Promise.all([startFakeSandbox(), startFakeSandbox(), startFakeSandbox()]);
    for (const upstream of upstreams) defer(() => upstream.close());
    const [defaultUp, prod, staging] = upstreams as [FakeSandbox, FakeSandbox, FakeSandbox];
    const timers = new HandTimers();
    const t = await relay(
      { upstreamBaseUrl: defaultUp.baseUrl, upstreamApiKey: defaultUp.apiKey, accounts: accountsOn(prod, staging), reconcileInterval: '10m', reconcileMaxRps: 1000 },
      { reconcile: { timers, upstream: fastUpstream } },
    );
    expect(timers.planned.map((p) => p.ms)).toEqual([10_000, 10_000, 10_000]);
    const gauge = () => metricValue(t.registry, 'boxrelay_reconcile_last_success_timestamp_seconds', {});
    for (const [i, upstream] of upstreams.entries()) {
      const [timer] = timers.planned.splice(0, 1);
      t.clock.advance(MINUTE);
      await timer!.callback();
      expect(upstream.requests.map((r) => r.path)).toEqual(['/v1/boxes']);
      // Until every account has succeeded once, the oldest success is none.
      expect(await gauge()).toBe(i < 2 ? 0 : (t.clock.now() - 2 * MINUTE) / 1000);
    }
    const runs = await t.relay.store.database.kysely.selectFrom('reconcile_runs').select(['account', 'outcome']).orderBy('started_at').execute();
    expect(runs).toEqual([
      { account: 'default', outcome: 'succeeded' },
      { account: 'prod', outcome: 'succeeded' },
      { account: 'staging', outcome: 'succeeded' },
    ]);
    // Each account's next run is planned an interval on.
    expect(timers.planned.map((p) => p.ms)).toEqual([10 * MINUTE, 10 * MINUTE, 10 * MINUTE]);
  });
});

describe('boxrelay reconcile --account', () => {
  beforeAll(requireBuild);

  it("runs that account's reconciliation and prints its run; an unknown account or one without credentials exits 2", async () => {
    const prod = await startFakeSandbox();
    try {
      const database = sqliteFile();
      const accountsFile = join(dirname(database), 'accounts.yaml');
      writeFileSync(accountsFile, `- {name: prod, secrets: [${PROD}], upstreamBaseUrl: "${prod.baseUrl}", upstreamApiKey: ${prod.apiKey}}\n- {name: staging, secrets: [${STAGING}]}\n`);
      const env = { BOXRELAY_DATABASE: database, BOXRELAY_ACCOUNTS_FILE: accountsFile, LOG_LEVEL: 'warn' };
      prod.setBox({ id: 'bx_cli', name: 'cli', state: 'error', updatedAt: iso(Date.now() + MINUTE) });

      const real = await runCli(['reconcile', '--account', 'prod'], env);
      expect(real.code).toBe(0);
      expect(JSON.parse(real.stdout)).toMatchObject({ outcome: 'succeeded', eventsSynthesized: 1 });
      expect(new Set(prod.requests.map((r) => r.authorization))).toEqual(new Set([`Bearer ${prod.apiKey}`]));
      const { database: db } = await openMigrated({ url: database });
      try {
        expect(await db.kysely.selectFrom('reconcile_runs').select('account').execute()).toEqual([{ account: 'prod' }]);
        expect((await db.kysely.selectFrom('boxes').select('id').execute()).map((b) => b.id)).toEqual(['prod:bx_cli']);
        expect(await db.kysely.selectFrom('audit').select(['action', 'detail']).execute()).toEqual([{ action: 'reconcile', detail: '{"account":"prod"}' }]);
      } finally {
        await db.close();
      }

      const unknown = await runCli(['reconcile', '--account', 'nope'], env);
      expect(unknown).toMatchObject({ code: 2, stdout: '', stderr: 'boxrelay: --account: no account is named "nope" (accounts: default, prod, staging)\n' });
      const staging = await runCli(['reconcile', '--account', 'staging'], env);
      expect(staging).toMatchObject({ code: 2, stdout: '', stderr: 'boxrelay: reconciliation of account staging needs its upstreamBaseUrl and upstreamApiKey\n' });
      for (const result of [real, unknown, staging]) expect(result.stdout + result.stderr).not.toContain(prod.apiKey);
    } finally {
      await prod.close();
    }
    // Three processes, each starting Node and opening the database: seconds each on a busy machine.
  }, 90_000);
});
