import { describe, expect, it } from 'vitest';
import { engines, postgresSchema } from './support/databases.js';
import { advanceAndWake, fanoutFixture, hook, metricValue, pendingCount } from './support/fanout-relay.js';
import { waitFor } from './support/fanout.js';
import type { HookRequest, HookServer } from './support/hook-server.js';
import type { TestRelay } from './support/relay.js';
import { HandTimers } from './support/timers.js';

const MINUTE = 60_000;
/** Past the 5-minute window: the minutes counted before leave it. */
const PAST_WINDOW = 6 * MINUTE;

const { server, relay } = fanoutFixture();

interface Degraded {
  type: string;
  subject: string;
  source: string;
  data: { sink: string; threshold: number; failureRate: number; attempts: number };
}
const cloudEvent = (r: HookRequest) => JSON.parse(r.body) as Degraded;

/** The `boxrelay.sink.degraded` events stored (on every replica of the database), oldest first. */
async function degradedEvents(t: TestRelay): Promise<Degraded['data'][]> {
  const rows = await t.relay.store.database.kysely
    .selectFrom('deliveries')
    .select('payload')
    .where('type', '=', 'boxrelay.sink.degraded')
    .orderBy('received_at')
    .orderBy('seq')
    .execute();
  return rows.map((row) => (JSON.parse(row.payload) as { data: Degraded['data'] }).data);
}

/** A hook that fails the events of boxes named `bx_fail_…` (503) and takes the rest. */
const flakyAnswer = (r: HookRequest) => (cloudEvent(r).subject.startsWith('bx_fail') ? 503 : 200);

/**
 * The failing hook, which would take operator events about sinks (never its own): one attempt per
 * event, so each event is one attempt; never paused, so every event is attempted.
 */
const flakyHook = (url: string) => hook('flaky', url, { events: ['box.*', 'boxrelay.sink.*'], maxAttempts: 1, pauseAfter: 0 });
/** Where operator events about sinks go. */
const opsHook = (url: string) => hook('ops', url, { events: ['boxrelay.sink.*'] });

let posted = 0;
/** Posts `ok` events the flaky hook takes and `fail` it refuses, through `t`, and waits until each was attempted and the lanes are idle. */
async function attempt(t: TestRelay, flaky: HookServer, { ok, fail }: { ok: number; fail: number }, others: TestRelay[] = []): Promise<void> {
  const before = flaky.requests.length;
  for (let i = 0; i < ok + fail; i++) expect((await t.post({ boxId: `bx_${i < fail ? 'fail' : 'ok'}_${posted++}` })).status).toBe(200);
  await flaky.receivedAtLeast(before + ok + fail);
  await waitFor(async () => (await pendingCount(t, 'flaky')) === 0, 'every flaky event to be settled');
  for (const each of [t, ...others]) await each.relay.fanout.whenIdle();
}

describe.each(engines)('failures graded on $name (boxrelay.sink.degraded)', ({ url }) => {
  it('announces 50, then 70 and 90 once each; a share between 25 % and the last threshold keeps them; under 25 % re-arms; the gauge shows the share', async () => {
    const flaky = await server(flakyAnswer);
    const ops = await server();
    const timers = new HandTimers();
    const t = await relay({ database: await url(), hooks: [flakyHook(flaky.url), opsHook(ops.url)] }, { degradation: { timers } });
    const ratio = () => metricValue(t.registry, 'boxrelay_sink_failure_ratio', { sink: 'flaky' });

    await attempt(t, flaky, { ok: 4, fail: 6 });
    await timers.fire();
    expect(await degradedEvents(t)).toEqual([{ sink: 'flaky', threshold: 50, failureRate: 0.6, attempts: 10 }]);
    const [announced] = await ops.received(1);
    expect(cloudEvent(announced!)).toMatchObject({ type: 'boxrelay.sink.degraded', subject: 'flaky', source: 'sandbox/boxrelay' });
    expect(await ratio()).toBe(0.6);
    // The ops hook's one attempt is under the minimum: no share to show.
    expect(await metricValue(t.registry, 'boxrelay_sink_failure_ratio', { sink: 'ops' })).toBe(0);

    // Still past 50 %: not again.
    await timers.fire();
    expect(await degradedEvents(t)).toHaveLength(1);

    await attempt(t, flaky, { ok: 0, fail: 5 });
    await timers.fire();
    await timers.fire();
    await attempt(t, flaky, { ok: 0, fail: 30 });
    await timers.fire();
    await timers.fire();
    expect(await degradedEvents(t)).toEqual([
      { sink: 'flaky', threshold: 50, failureRate: 0.6, attempts: 10 },
      { sink: 'flaky', threshold: 70, failureRate: 11 / 15, attempts: 15 },
      { sink: 'flaky', threshold: 90, failureRate: 41 / 45, attempts: 45 },
    ]);
    expect(await ratio()).toBe(41 / 45);

    // A new window at 30 %: better, but not under 25 %, so 50 is not announced again when it is passed.
    advanceAndWake(t, PAST_WINDOW);
    expect(await ratio()).toBe(0);
    await attempt(t, flaky, { ok: 7, fail: 3 });
    await timers.fire();
    await attempt(t, flaky, { ok: 0, fail: 10 });
    await timers.fire();
    expect(await degradedEvents(t)).toHaveLength(3);

    // Under 25 %: re-armed, and 50 % is announced again once passed.
    advanceAndWake(t, PAST_WINDOW);
    await attempt(t, flaky, { ok: 10, fail: 0 });
    await timers.fire();
    expect(await ratio()).toBe(0);
    await attempt(t, flaky, { ok: 0, fail: 12 });
    await timers.fire();
    expect((await degradedEvents(t)).slice(3)).toEqual([{ sink: 'flaky', threshold: 50, failureRate: 12 / 22, attempts: 22 }]);

    // Every announcement reached the ops hook, none the hook it was about.
    expect((await ops.received(4)).map((r) => cloudEvent(r).data.threshold)).toEqual([50, 70, 90, 50]);
    await t.relay.fanout.whenIdle();
    expect(flaky.requests.filter((r) => cloudEvent(r).type.startsWith('boxrelay.'))).toEqual([]);
  });

  it('fewer than 10 attempts in the window: no announcement, and a ratio of 0', async () => {
    const flaky = await server(flakyAnswer);
    const ops = await server();
    const timers = new HandTimers();
    const t = await relay({ database: await url(), hooks: [flakyHook(flaky.url), opsHook(ops.url)] }, { degradation: { timers } });

    await attempt(t, flaky, { ok: 0, fail: 9 });
    await timers.fire();
    expect(await degradedEvents(t)).toEqual([]);
    expect(await metricValue(t.registry, 'boxrelay_sink_failure_ratio', { sink: 'flaky' })).toBe(0);

    // Nine more a minute later: 18 within the window, all failed.
    advanceAndWake(t, MINUTE);
    await attempt(t, flaky, { ok: 0, fail: 9 });
    await timers.fire();
    expect(await degradedEvents(t)).toEqual([{ sink: 'flaky', threshold: 90, failureRate: 1, attempts: 18 }]);
    expect(await metricValue(t.registry, 'boxrelay_sink_failure_ratio', { sink: 'flaky' })).toBe(1);
    await ops.received(1);
  });
});

describe('failures graded across replicas (PostgreSQL)', () => {
  it("two dispatchers on one schema: the share counts both replicas' attempts, and each threshold is announced once", async () => {
    const flaky = await server(flakyAnswer);
    const ops = await server();
    const database = await postgresSchema();
    const hooks = [flakyHook(flaky.url), opsHook(ops.url)];
    const [timersA, timersB] = [new HandTimers(), new HandTimers()];
    const a = await relay({ database, hooks }, { degradation: { timers: timersA } });
    const b = await relay({ database, hooks }, { degradation: { timers: timersB }, clock: a.clock });
    const checkBoth = () => Promise.all([timersA.fire(), timersB.fire()]);

    // Five attempts through each replica: under the minimum alone, ten together.
    await attempt(a, flaky, { ok: 2, fail: 3 }, [b]);
    await attempt(b, flaky, { ok: 2, fail: 3 }, [a]);
    await checkBoth();
    expect(await degradedEvents(a)).toEqual([{ sink: 'flaky', threshold: 50, failureRate: 0.6, attempts: 10 }]);
    expect(await metricValue(b.registry, 'boxrelay_sink_failure_ratio', { sink: 'flaky' })).toBe(0.6);

    await attempt(a, flaky, { ok: 0, fail: 5 }, [b]);
    await checkBoth();
    await checkBoth();
    await attempt(b, flaky, { ok: 0, fail: 30 }, [a]);
    await checkBoth();
    await checkBoth();
    expect((await degradedEvents(b)).map((data) => data.threshold)).toEqual([50, 70, 90]);
    expect((await ops.received(3)).map((r) => cloudEvent(r).data.threshold)).toEqual([50, 70, 90]);
  });
});
