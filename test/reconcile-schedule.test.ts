import { Migrator } from 'kysely';
import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { migrations } from '../migrations/index.js';
import { configSchema } from '../src/config/schema.js';
import { createRelay, type Relay } from '../src/main.js';
import { openDatabase } from '../src/store/engines/database.js';
import { openMigrated } from '../src/store/engines/migrate.js';
import { readWatchStart } from '../src/store/state/reconcile-runs.js';
import { fanoutFixture, fastTuning, hook, outboxRows } from './support/fanout-relay.js';
import { startFakeSandbox } from './support/fake-sandbox.js';
import { waitFor } from './support/fanout.js';
import { postgresSchema, sqliteFile } from './support/databases.js';
import { captureLogs } from './support/log-capture.js';
import { requireBuild, runCli } from './support/process.js';
import { HandTimers } from './support/timers.js';
import { SECRET, eventId } from './support/sign.js';

const MINUTE = 60_000;
const iso = (ms: number) => new Date(ms).toISOString();

describe('reconciliation schedule', () => {
  const { defer, relay } = fanoutFixture();

  it('runs within 30 s of start-up, then once per interval, skipping an interval another run already covered', async () => {
    const upstream = await startFakeSandbox();
    defer(() => upstream.close());
    const timers = new HandTimers();
    const t = await relay({ upstreamBaseUrl: upstream.baseUrl, upstreamApiKey: upstream.apiKey, reconcileInterval: '10m' }, { reconcile: { timers } });
    upstream.setBox({ id: 'bx_1', name: 'one', state: 'ready', updatedAt: iso(t.clock.now() - MINUTE) });

    expect(await timers.fire()).toBeLessThanOrEqual(30_000);
    const runs = () => t.relay.store.database.kysely.selectFrom('reconcile_runs').select(['outcome']).execute();
    expect(await runs()).toEqual([{ outcome: 'succeeded' }]);

    // Next tick comes a whole interval later; a run on demand in between makes it skip.
    t.clock.advance(5 * MINUTE);
    await (await t.relay.reconciler!.start({ dryRun: false })).finished;
    t.clock.advance(6 * MINUTE);
    expect(await timers.fire()).toBe(10 * MINUTE);
    expect(await runs()).toHaveLength(2);
    t.clock.advance(10 * MINUTE);
    await timers.fire();
    expect(await runs()).toHaveLength(3);
    expect(upstream.requests.filter((r) => r.path === '/v1/boxes')).toHaveLength(3);
  });

  it('does not schedule runs with BOXRELAY_RECONCILE_INTERVAL=off, but still runs on demand', async () => {
    const upstream = await startFakeSandbox();
    defer(() => upstream.close());
    const timers = new HandTimers();
    const t = await relay({ upstreamBaseUrl: upstream.baseUrl, upstreamApiKey: upstream.apiKey, reconcileInterval: 'off' }, { reconcile: { timers } });
    expect(timers.planned).toHaveLength(0);
    expect((await (await t.relay.reconciler!.start({ dryRun: false })).finished).outcome).toBe('succeeded');
  });
});

describe('reconciliation across replicas on PostgreSQL', () => {
  const { defer, server } = fanoutFixture();

  it('two replicas started together run one reconciliation, and each event appears once', async () => {
    const upstream = await startFakeSandbox();
    defer(() => upstream.close());
    const receiver = await server();
    const database = await postgresSchema();
    const now = Date.now();
    const events: string[] = [];
    for (let i = 0; i < 6; i++) {
      const boxId = `bx_${i}`;
      upstream.setBox({ id: boxId, name: `b${i}`, state: 'error', updatedAt: iso(now - 2 * MINUTE) });
      const id = eventId();
      events.push(id);
      upstream.addHistory(boxId, { id, type: 'box.error', createdAt: iso(now - 2 * MINUTE), data: { box: { id: boxId }, previousState: 'ready', state: 'error' } });
    }
    const config = configSchema.parse({
      fanoutThread: 'inline',
      database,
      secrets: [SECRET],
      port: 0,
      internalPort: 0,
      host: '127.0.0.1',
      internalHost: '127.0.0.1',
      upstreamBaseUrl: upstream.baseUrl,
      upstreamApiKey: upstream.apiKey,
      hooks: [hook('all', receiver.url)],
    });
    const start = async (): Promise<Relay> => {
      const r = await createRelay({ config, logger: captureLogs().logger, registry: new Registry(), dispatch: fastTuning, reconcile: { firstDelayMs: 0 } });
      defer(() => r.stop());
      return r;
    };
    const [a, b] = await Promise.all([start(), start()]);
    // The watch started before the missed events.
    await a!.store.database.kysely.updateTable('relay_meta').set({ value: iso(now - 60 * MINUTE) }).where('name', '=', 'watch_start').execute();
    await Promise.all([a!.start(), b!.start()]);

    const kysely = a!.store.database.kysely;
    await waitFor(async () => (await kysely.selectFrom('reconcile_runs').select('outcome').where('outcome', 'is not', null).execute()).length > 0, 'a run to finish');
    await waitFor(async () => receiver.requests.length >= 6 && (await outboxRows(a!.store, 'all')).length === 0, 'every event delivered');
    // Both schedules fired at start-up; the lease let one of them run.
    const runs = await kysely.selectFrom('reconcile_runs').select('outcome').execute();
    expect(runs).toEqual([{ outcome: 'succeeded' }]);
    expect(upstream.requests.filter((r) => r.path === '/v1/boxes')).toHaveLength(1);
    expect(receiver.requests.map((r) => r.headers['webhook-id']).sort()).toEqual([...events].sort());
  });
});

describe('boxrelay reconcile', () => {
  it('prints the run; --dry-run changes nothing; a refused key ends it failed with exit 1; unconfigured exits 2', async () => {
    requireBuild();
    const upstream = await startFakeSandbox();
    try {
      const database = sqliteFile();
      const env = { BOXRELAY_DATABASE: database, BOXRELAY_UPSTREAM_BASE_URL: upstream.baseUrl, BOXRELAY_UPSTREAM_API_KEY: upstream.apiKey, LOG_LEVEL: 'warn' };
      upstream.setBox({ id: 'bx_cli', name: 'cli', state: 'error', updatedAt: iso(Date.now() + MINUTE) });
      // A work record in its history: skipped and counted in the printed run.
      upstream.addHistory('bx_cli', { kind: 'prompt.output', text: 'done' });

      const dry = await runCli(['reconcile', '--dry-run'], env);
      expect(dry.code).toBe(0);
      const planned = JSON.parse(dry.stdout) as { outcome: string; actions: unknown[] };
      expect(planned).toMatchObject({ outcome: 'dry-run', boxesListed: 1, historyRecordsSkipped: 1, actions: [{ boxId: 'bx_cli', action: 'synthesize', type: 'box.error' }] });

      const real = await runCli(['reconcile'], env);
      expect(real.code).toBe(0);
      expect(JSON.parse(real.stdout)).toMatchObject({ outcome: 'succeeded', eventsSynthesized: 1, historyRecordsSkipped: 1 });

      upstream.inject({ kind: 'error', status: 401, code: 'unauthorized', path: '/v1/boxes' });
      const refused = await runCli(['reconcile'], env);
      expect(refused.code).toBe(1);
      expect(JSON.parse(refused.stdout)).toMatchObject({ outcome: 'failed', error: expect.stringContaining('refused the API key (401)') });
      expect(refused.stdout + refused.stderr).not.toContain(upstream.apiKey);

      const unconfigured = await runCli(['reconcile'], { BOXRELAY_DATABASE: database });
      expect(unconfigured.code).toBe(2);
      expect(unconfigured.stderr).toContain('BOXRELAY_UPSTREAM_BASE_URL');
    } finally {
      await upstream.close();
    }
  });
});

describe('the watch start', () => {
  it('is the time the database was created, or for one that predates reconciliation, the time of that migration', async () => {
    const url = sqliteFile();
    const old = openDatabase({ url });
    const before = Object.fromEntries(Object.entries(migrations).filter(([name]) => name < '004'));
    await new Migrator({ db: old.kysely, provider: { getMigrations: async () => before } }).migrateToLatest();
    await old.kysely.insertInto('deliveries').values({ id: eventId(), type: 'box.ready', box_id: 'bx_1', created_at: iso(0), received_at: 0, attempt: 1, payload: '{}' } as never).execute();
    await old.close();

    const upgradedAt = Date.now();
    const { database } = await openMigrated({ url });
    try {
      const watchStart = Date.parse(await readWatchStart(database.kysely));
      expect(watchStart).toBeGreaterThanOrEqual(upgradedAt);
      expect(watchStart).toBeLessThanOrEqual(Date.now());
      // The delivery from before is kept, as a received webhook (no origin).
      expect(await database.kysely.selectFrom('deliveries').select('origin').execute()).toEqual([{ origin: null }]);
    } finally {
      await database.close();
    }
  });
});
