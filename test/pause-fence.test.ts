import { afterEach, describe, expect, it } from 'vitest';
import type { FanoutStore } from '../src/store/fanout-store.js';
import { createSinkStates, type SinkStates } from '../src/store/state/sink-state.js';
import { dispatchHarness, type Harness, type HarnessOptions } from './support/dispatch-harness.js';
import { openStore } from '../src/store/store.js';
import { POSTGRES_URL, engines, postgresSchema } from './support/databases.js';
import { recordEvent, waitFor } from './support/fanout.js';
import { SECRET } from './support/sign.js';
import { slowTcp } from './support/slow-tcp.js';
import { hookServer, type HookServer } from './support/hook-server.js';

/**
 * Contract section 5: once a pause is answered, no attempt starts on any replica, for a pause
 * repeated or sent to two replicas at once, and while the database answers slowly; a slow database
 * delays the sinks' work and never stops a sink that is not paused. A pause is answered once every
 * lane has acknowledged its epoch (or its lease ended), not after a wait on a clock.
 */
const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});
const harness = (options: HarnessOptions): Promise<Harness> => dispatchHarness(cleanups, options);

async function hook(): Promise<HookServer> {
  const server = await hookServer();
  cleanups.push(() => server.close());
  return server;
}

/** A promise a test resolves by hand. */
function gate(): { opened: Promise<void>; open(): void } {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => (open = resolve));
  return { opened, open };
}

/** Holds each lane's acknowledgement of a pause epoch (a renewal or an acknowledgement naming an epoch past 0) until `release`; `reached` once one is held. */
function heldAcknowledgements(): { reached: Promise<void>; release(): void; wrapStore: (store: FanoutStore) => FanoutStore } {
  const reached = gate();
  const released = gate();
  return {
    reached: reached.opened,
    release: released.open,
    wrapStore: (store) => {
      const held = async (seenEpoch: number) => {
        if (seenEpoch === 0) return;
        reached.open();
        await released.opened;
      };
      return {
        ...store,
        log: {
          ...store.log,
          acquireParts: async (request) => (await held(request.seenEpoch), store.log.acquireParts(request)),
          acknowledge: async (reader) => (await held(reader.seenEpoch), store.log.acknowledge(reader)),
        },
      };
    },
  };
}

/** Counts the pause's looks at the lanes (each answered with lanes still behind). */
function countedLooks(): { looks: () => number; wrapStates: (states: SinkStates) => SinkStates } {
  let looks = 0;
  return {
    looks: () => looks,
    wrapStates: (states) => ({
      ...states,
      async lanesBehind(sink, epoch, now) {
        const behind = await states.lanesBehind(sink, epoch, now);
        if (behind > 0) looks++;
        return behind;
      },
    }),
  };
}

/** The answer of a pause, and whether it came yet. */
function answerOf(pausing: Promise<boolean>): { answered: () => boolean; answer: Promise<boolean> } {
  let answered = false;
  const answer = pausing.finally(() => (answered = true));
  return { answered: () => answered, answer };
}

describe.each(engines)('a pause repeated on $name', ({ url }) => {
  it('is answered once the lane has acknowledged it, not at once; nothing starts after the answer', async () => {
    const target = await hook();
    const acks = heldAcknowledgements();
    const looked = countedLooks();
    const t = await harness({ url: await url(), config: { hooks: [{ name: 'h', url: target.url }] }, wrapStore: acks.wrapStore, wrapStates: looked.wrapStates });
    // Paused already, by a request whose answer is not this test's (another replica's, stored without telling this one).
    expect(await createSinkStates(t.store.database).pause('h', 'operator', Date.now())).toBe(true);

    const repeat = answerOf(t.pauses.pauseByOperator('h'));
    await acks.reached;
    await waitFor(() => looked.looks() >= 3, 'the pause to look at the lanes three times');
    expect(repeat.answered()).toBe(false);
    acks.release();
    // Not this call's pause: answered, not announced again.
    expect(await repeat.answer).toBe(false);

    await t.post('bx_after');
    t.dispatcher.wake('all');
    await t.dispatcher.whenIdle();
    expect(t.started).toEqual([]);
    expect(target.requests).toEqual([]);
  });
});

describe('a pause sent to two replicas at once, on PostgreSQL', () => {
  it('is answered by each once both lanes have acknowledged it; neither replica starts anything after', async () => {
    const target = await hook();
    const schema = await postgresSchema();
    const config = { hooks: [{ name: 'h', url: target.url }] };
    const looked = countedLooks();
    const a = await harness({ url: schema, config, wrapStates: looked.wrapStates });
    const slow = heldAcknowledgements();
    const b = await harness({ url: schema, config, wrapStore: slow.wrapStore, wrapStates: looked.wrapStates });

    const answers = [answerOf(a.pauses.pauseByOperator('h')), answerOf(b.pauses.pauseByOperator('h'))];
    await slow.reached;
    await waitFor(() => looked.looks() >= 6, 'both pauses to look at the lanes');
    expect(answers.map((answer) => answer.answered())).toEqual([false, false]);
    slow.release();
    // One of them stored the pause; the other found it stored.
    expect((await Promise.all(answers.map((answer) => answer.answer))).sort()).toEqual([false, true]);

    await a.post('bx_a');
    await b.post('bx_b');
    for (const replica of [a, b]) {
      replica.dispatcher.wake('all');
      await replica.dispatcher.whenIdle();
    }
    expect([...a.started, ...b.started]).toEqual([]);
    expect(target.requests).toEqual([]);
  });
});

describe.each(engines)('a slow database on $name', ({ url }) => {
  it('delays a sink that is not paused, never stops it: every read of its state and every renewal 1.5 s late', async () => {
    const target = await hook();
    const late = <T>(answer: Promise<T>) => answer.then((value) => new Promise<T>((resolve) => setTimeout(() => resolve(value), 1500)));
    const t = await harness({
      url: await url(),
      config: { hooks: [{ name: 'h', url: target.url }] },
      wrapStates: (states) => ({ ...states, read: (sink) => late(states.read(sink)) }),
      wrapStore: (store) => ({ ...store, log: { ...store.log, acquireParts: (request) => late(store.log.acquireParts(request)) } }),
    });
    const ids = [await t.post('bx_s1'), await t.post('bx_s2'), await t.post('bx_s3')];
    const requests = await target.received(3, 30_000);
    expect(requests.map((r) => (JSON.parse(r.body) as { id: string }).id).sort()).toEqual([...ids].sort());
  });
});

describe('a database answering every round trip 1.2 s late, on PostgreSQL (a proxy in between)', () => {
  it('delays a hook that is not paused, never stops it', { timeout: 120_000 }, async () => {
    const target = await hook();
    const direct = await postgresSchema();
    // Migrated at full speed: through the slow proxy a start alone takes minutes of round trips.
    const store = await openStore({ url: direct });
    cleanups.push(() => store.close());
    const serverPort = Number(new URL(POSTGRES_URL).port || 5432);
    const proxy = await slowTcp(serverPort, 0);
    cleanups.push(() => proxy.close());
    const t = await harness({ url: direct.replace(`:${serverPort}/`, `:${proxy.port}/`), config: { hooks: [{ name: 'h', url: target.url }] } });
    // Started: from now on every round trip of the relay's connections answers 1.2 s late.
    proxy.delayMs = 1200;
    const ids = [];
    for (const boxId of ['bx_s1', 'bx_s2', 'bx_s3']) ids.push(await recordEvent(store, { receivedAt: Date.now(), boxId, sinks: ['h'], secret: SECRET }));
    await store.sequenceLog();
    t.dispatcher.wake('log');
    const requests = await target.received(3, 100_000);
    expect(requests.map((r) => (JSON.parse(r.body) as { id: string }).id).sort()).toEqual([...ids].sort());
  });
});
