import request from 'supertest';
import { describe, expect, it } from 'vitest';
import type { Run } from '../src/store/state/reconcile-runs.js';
import type { Timers } from '../src/schedule.js';
import { engines } from './support/databases.js';
import { startFakeSandbox } from './support/fake-sandbox.js';
import { adminAuth, fanoutFixture, metricValue } from './support/fanout-relay.js';
import { waitFor } from './support/fanout.js';
import type { HookServer } from './support/hook-server.js';
import { fastUpstream, gate, reconcileSettings, setWatchStart } from './support/reconcile.js';
import type { TestRelay } from './support/relay.js';
import { eventId } from './support/sign.js';

const MINUTE = 60_000;
const iso = (ms: number) => new Date(ms).toISOString();

/** A lifecycle event as the delivery payload (sandbox-api-v1.md, "Delivery payload"). */
function lifecycle(boxId: string, type: string, createdAt: number, state: string, previousState: string) {
  return { id: eventId(), type, createdAt: iso(createdAt), data: { box: { id: boxId, name: `n-${boxId}` }, previousState, state } };
}

/**
 * Records of a box's history that are not lifecycle events. The upstream document does not show
 * their shape ("its record shape: not shown"; read "while work runs"), so these are invented: every
 * kind of JSON value, ids of other forms or none, work types, deep and huge content.
 */
function workRecords(boxId: string, at: number): unknown[] {
  const time = iso(at);
  return [
    { kind: 'prompt.output', text: 'compiling…\n'.repeat(20_000) },
    { id: 'msg_01HZX', type: 'prompt.output', createdAt: time, data: { chunk: 'hello', box: { id: boxId } } },
    { id: eventId(), type: 'prompt.queued', createdAt: time, data: { promptId: 'pr_1', provider: 'anthropic' } },
    { type: 'tool.call', createdAt: time, data: { name: 'bash', args: ['ls', { nested: { deeper: [1, 2, null, { deepest: [[[]]] }] } }] } },
    { id: 'run_7', type: 'command.finished', createdAt: time, data: { exitCode: 0, stdout: 'x'.repeat(100_000) } },
    // The document's own error body carries `type: box.error`: not the delivery payload's shape.
    { ok: false, type: 'box.error', status: 500, code: 'http_500', message: 'stream failed', requestId: 'req_1' },
    { id: 42, type: 'box.ready', createdAt: time, data: { box: { id: boxId } } },
    { id: eventId(), type: 'box.ready', createdAt: time, data: 'ready' },
    { id: eventId(), type: 'box.ready', data: { box: { id: boxId } } },
    { event: null, kind: 'heartbeat' },
    { event: { type: 'box.ready' } },
    { id: eventId(), type: 'boxrelay.event.dead_lettered', createdAt: time, subject: boxId, data: { box: { id: boxId }, eventId: eventId() } },
    null,
    42,
    'progress 40%',
    [1, 'two', { three: 3 }],
    {},
    true,
  ];
}

interface CloudEventBody {
  id: string;
  type: string;
  boxrelayorigin?: string;
}
const relayed = (server: HookServer): CloudEventBody[] => server.requests.map((r) => JSON.parse(r.body) as CloudEventBody);

for (const engine of engines) {
  describe(`reconciliation of real histories on ${engine.name}`, () => {
    const { defer, server, relay } = fanoutFixture();

    async function setup(overrides: Record<string, unknown> = {}, pageSize?: number, runTimers?: Timers) {
      const upstream = await startFakeSandbox({ pageSize });
      defer(() => upstream.close());
      const receiver = await server();
      const t = await relay(
        { database: await engine.migratedUrl(), ...reconcileSettings(upstream, receiver.url, ['*', 'boxrelay.*']), ...overrides },
        { reconcile: { upstream: fastUpstream, runTimers } },
      );
      await setWatchStart(t, t.clock.now() - 60 * MINUTE);
      return { upstream, receiver, t };
    }

    const reconcile = async (t: TestRelay): Promise<Run> => (await t.relay.reconciler!.start({ dryRun: false })).finished;
    const stored = async (t: TestRelay) => t.relay.store.database.kysely.selectFrom('deliveries').select(['id', 'type', 'origin']).orderBy('created_at').execute();
    const skippedWarnings = (t: TestRelay) => t.logs.entries().filter((e) => String(e.msg).startsWith('history record skipped'));

    it('repairs the lifecycle events of a history that is mostly work records, and counts exactly what it skipped', async () => {
      const { upstream, receiver, t } = await setup({}, 7);
      const now = t.clock.now();
      const ready = lifecycle('bx_w', 'box.ready', now - 40 * MINUTE, 'ready', 'cloning');
      const error = lifecycle('bx_w', 'box.error', now - 30 * MINUTE, 'error', 'ready');
      const back = lifecycle('bx_w', 'box.ready', now - 20 * MINUTE, 'ready', 'error');
      const work = [...workRecords('bx_w', now - 45 * MINUTE), ...workRecords('bx_w', now - 35 * MINUTE), ...workRecords('bx_w', now - 25 * MINUTE)];
      const third = work.length / 3;
      // Newest first, the last one under the record's `event` key, each among work records, over several pages.
      upstream.addHistory('bx_w', ...work.slice(0, third), { event: back, seq: 3 }, ...work.slice(third, 2 * third), error, ...work.slice(2 * third), ready);
      upstream.setBox({ id: 'bx_w', name: 'n-bx_w', state: 'ready', updatedAt: iso(now - 20 * MINUTE) });

      const internal = request(t.relay.internalApp);
      expect((await internal.post('/admin/reconcile').set(adminAuth)).status).toBe(202);
      const report = await waitFor(async () => {
        const status = await internal.get('/admin/reconcile').set(adminAuth);
        return status.body.running === false ? (status.body.last as Run) : undefined;
      }, 'the run to end');
      expect(report).toMatchObject({
        outcome: 'succeeded',
        boxesListed: 1,
        boxesRepaired: 1,
        eventsFromHistory: 3,
        eventsSynthesized: 0,
        historyRecordsSkipped: work.length,
        error: null,
      });
      // More than one page of history was read.
      expect(upstream.requests.filter((r) => r.path === '/v1/boxes/bx_w/events').length).toBe(Math.ceil((work.length + 3) / 7));

      await receiver.received(3);
      expect(relayed(receiver).map((e) => [e.id, e.boxrelayorigin])).toEqual([
        [ready.id, 'history'],
        [error.id, 'history'],
        [back.id, 'history'],
      ]);
      expect(await stored(t)).toEqual([
        { id: ready.id, type: 'box.ready', origin: 'history' },
        { id: error.id, type: 'box.error', origin: 'history' },
        { id: back.id, type: 'box.ready', origin: 'history' },
      ]);
      const box = await t.relay.store.database.kysely.selectFrom('boxes').selectAll().where('id', '=', 'bx_w').executeTakeFirstOrThrow();
      expect(box).toMatchObject({ state: 'ready', previous_state: 'error', last_event_id: back.id });
      // Work records are not problems: nothing to warn about, no failure announced.
      expect(skippedWarnings(t)).toEqual([]);
      expect(await metricValue(t.registry, 'boxrelay_reconcile_runs_total', { outcome: 'failed' })).toBe(0);
    });

    it('skips a malformed lifecycle record with a warning (its id cut short), and takes the box\'s other records', async () => {
      const { upstream, receiver, t } = await setup();
      const now = t.clock.now();
      const ready = lifecycle('bx_m', 'box.ready', now - 40 * MINUTE, 'ready', 'cloning');
      const archived = lifecycle('bx_m', 'box.archived', now - 10 * MINUTE, 'archived', 'ready');
      const injected = { ...lifecycle('bx_m', 'box.error', now - 30 * MINUTE, 'error', 'ready'), id: 'evt_1\r\n{"level":60,"msg":"forged"}' };
      const otherBox = lifecycle('bx_other', 'box.error', now - 20 * MINUTE, 'error', 'ready');
      const long = { ...lifecycle('bx_m', 'box.error', now - 15 * MINUTE, 'error', 'ready'), id: `evt_${'a'.repeat(5000)}` };
      upstream.addHistory('bx_m', ready, injected, { note: 'work' }, otherBox, long, archived);
      upstream.setBox({ id: 'bx_m', name: 'n-bx_m', state: 'archived', updatedAt: iso(now - 10 * MINUTE) });

      const run = await reconcile(t);
      expect(run).toMatchObject({ outcome: 'succeeded', eventsFromHistory: 2, eventsSynthesized: 0, historyRecordsSkipped: 4, error: null });
      await receiver.received(2);
      expect(relayed(receiver).map((e) => e.id)).toEqual([ready.id, archived.id]);
      expect((await stored(t)).map((r) => r.id)).toEqual([ready.id, archived.id]);
      expect(await t.relay.store.database.kysely.selectFrom('boxes').select('id').where('id', '=', 'bx_other').execute()).toEqual([]);

      const warnings = skippedWarnings(t);
      expect(warnings.map((w) => [w.boxId, w.record, w.msg])).toEqual([
        ['bx_m', 1, 'history record skipped: id is not an evt_ id'],
        ['bx_m', 3, 'history record skipped: data.box.id names another box'],
        ['bx_m', 4, 'history record skipped: id is not an evt_ id'],
      ]);
      expect(warnings[2]!.eventId).toBe(`evt_${'a'.repeat(60)}…(5004 chars)`);
      // The CR/LF stays inside one JSON log line: nothing forged a line of its own.
      expect(t.logs.entries().some((e) => e.msg === 'forged')).toBe(false);
      expect(warnings[0]!.eventId).toBe(injected.id);
    });

    it('ends a run failed at BOXRELAY_RECONCILE_MAX_PAGES, counting every listing together', async () => {
      const { upstream, receiver, t } = await setup({ reconcileMaxPages: 6 }, 1);
      const now = t.clock.now();
      upstream.setBox({ id: 'bx_1', name: 'one', state: 'ready', updatedAt: iso(now - MINUTE) });
      upstream.setBox({ id: 'bx_2', name: 'two', state: 'ready', updatedAt: iso(now - MINUTE) });
      // Empty pages with a new cursor every time: only the bound ends this history.
      upstream.pageForever('/v1/boxes/bx_1/events');

      const run = await reconcile(t);
      expect(run.outcome).toBe('failed');
      expect(run.error).toMatch(/BOXRELAY_RECONCILE_MAX_PAGES \(6\)/);
      expect(upstream.requests.map((r) => r.path)).toEqual(['/v1/boxes', '/v1/boxes', ...Array(4).fill('/v1/boxes/bx_1/events')]);
      // The run announced its failure and took nothing for the box it did not finish.
      expect((await stored(t)).map((r) => [r.type, r.origin])).toEqual([['boxrelay.reconcile.failed', 'operator']]);
      await receiver.received(1);
      expect(relayed(receiver)[0]).toMatchObject({ type: 'boxrelay.reconcile.failed' });
      expect(await t.relay.store.database.kysely.selectFrom('boxes').select('id').execute()).toEqual([]);
      expect((await request(t.relay.internalApp).get('/admin/reconcile').set(adminAuth)).body).toMatchObject({ running: false, last: { id: run.id, outcome: 'failed' } });
    });

    it('ends a run failed at BOXRELAY_RECONCILE_MAX_DURATION when the box list pages on forever', async () => {
      const { upstream, t } = await setup({ reconcileMaxDuration: '2m' });
      upstream.pageForever('/v1/boxes');
      // Each page takes 20 s of the relay's clock.
      upstream.onRequest(() => t.clock.advance(20_000));

      const run = await reconcile(t);
      expect(run.outcome).toBe('failed');
      expect(run.error).toMatch(/BOXRELAY_RECONCILE_MAX_DURATION \(120 s\)/);
      expect(upstream.requests).toHaveLength(6);
      expect(t.logs.entries().some((e) => String(e.msg).startsWith('reconciliation failed') && String(e.msg).includes('BOXRELAY_RECONCILE_MAX_DURATION'))).toBe(true);
      // A second run can start at once: the bound freed the lease.
      expect((await reconcile(t)).outcome).toBe('failed');
    });

    it('ends a run failed at BOXRELAY_RECONCILE_MAX_DURATION while a request hangs, cutting it', async () => {
      // The run's timers, fired by hand: the deadline is the one planned for the whole duration.
      const planned: { ms: number; callback: () => Promise<void> }[] = [];
      const timers: Timers = { setTimeout: (callback, ms) => planned.push({ ms, callback }), clearTimeout: () => {} };
      const { upstream, t } = await setup({ reconcileMaxDuration: '2m' }, undefined, timers);
      const hang = gate();
      defer(async () => hang.open());
      upstream.inject({ kind: 'hold', until: hang.until, path: '/v1/boxes' });

      const { finished } = await t.relay.reconciler!.start({ dryRun: false });
      await waitFor(() => upstream.requests.length === 1, 'the run to ask for the box list');
      const deadline = planned.find((p) => p.ms === 120_000);
      expect(deadline).toBeDefined();
      await deadline!.callback();
      const run = await finished;
      expect(run.outcome).toBe('failed');
      expect(run.error).toMatch(/BOXRELAY_RECONCILE_MAX_DURATION \(120 s\)/);
      expect(await stored(t)).toEqual([{ id: expect.any(String), type: 'boxrelay.reconcile.failed', origin: 'operator' }]);
    });
  });
}
