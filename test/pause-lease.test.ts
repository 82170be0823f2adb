import { afterEach, describe, expect, it } from 'vitest';
import type { Pauses } from '../src/dispatch/pauses.js';
import { createFanoutStore } from '../src/store/fanout-store.js';
import { createSinkStates } from '../src/store/state/sink-state.js';
import { dispatchHarness, type Harness, type HarnessOptions, type WrapSink } from './support/dispatch-harness.js';
import { ManualClock } from './support/clock.js';
import { engines } from './support/databases.js';
import { recordEvent, waitFor } from './support/fanout.js';
import { hookServer, type HookServer } from './support/hook-server.js';
import { SHARED_NATS, collect, natsClient, uniqueNames } from './support/nats.js';

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});
const harness = (options: HarnessOptions): Promise<Harness> => dispatchHarness(cleanups, options);

/** A gate a test opens by hand. */
function gate(): { opened: Promise<void>; open(): void } {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => (open = resolve));
  return { opened, open };
}

/** Holds the sink's first attempt until `release`: `sent` once it reached the sink. */
function holdFirstAttempt(before: () => unknown = () => {}): { sent: Promise<void>; release(): void; wrap: WrapSink } {
  const held = gate();
  const sent = gate();
  return {
    sent: sent.opened,
    release: held.open,
    wrap: (sink, index) => async (event, signal, options) => {
      before();
      if (index() === 1) {
        sent.open();
        await held.opened;
      }
      return sink.deliver(event, signal, options);
    },
  };
}

async function hook(answer?: Parameters<typeof hookServer>[0]): Promise<HookServer> {
  const server = await hookServer(answer);
  cleanups.push(() => server.close());
  return server;
}

describe.each(engines)('once a pause is answered no attempt starts, on $name', ({ url }) => {
  it('per-box: the entries waiting behind a box held open wait for the resume, then go in order', async () => {
    const answered = gate();
    const requested = gate();
    const target = await hook((_request, index) => (index === 0 ? (requested.open(), { status: 200, until: answered.opened }) : 200));
    const t = await harness({ url: await url(), config: { hooks: [{ name: 'h', url: target.url, ordering: 'per-box', concurrency: 4 }] } });
    const ids = [await t.post('bx_a'), await t.post('bx_a'), await t.post('bx_a')];
    // The box is held open by its first request, which left before the pause.
    await requested.opened;

    expect(await t.pauses.pauseByOperator('h')).toBe(true);
    answered.open();
    await target.received(1);
    await t.dispatcher.whenIdle();
    expect(t.started).toEqual([ids[0]]);

    expect(await t.pauses.resume('h', 'operator')).toBe(true);
    t.dispatcher.wake('all');
    const requests = await target.received(3);
    expect(requests.map((r) => (JSON.parse(r.body) as { id: string }).id)).toEqual(ids);
  });

  it('an attempt admitted before the pause whose request had not left (held in the sink): it waits too', async () => {
    const target = await hook();
    const first = holdFirstAttempt();
    const t = await harness({
      url: await url(),
      config: { hooks: [{ name: 'h', url: target.url, ordering: 'per-box', concurrency: 4 }] },
      wrap: first.wrap,
    });
    const ids = [await t.post('bx_w'), await t.post('bx_w')];
    await first.sent;

    expect(await t.pauses.pauseByOperator('h')).toBe(true);
    first.release();
    await t.dispatcher.whenIdle();
    expect(target.requests).toHaveLength(0);

    expect(await t.pauses.resume('h', 'operator')).toBe(true);
    t.dispatcher.wake('all');
    const requests = await target.received(2);
    expect(requests.map((r) => (JSON.parse(r.body) as { id: string }).id)).toEqual(ids);
  });

  it('maxPerSecond: the attempts waiting for their turn do not start after the answer', async () => {
    const target = await hook();
    const t = await harness({ url: await url(), config: { hooks: [{ name: 'h', url: target.url, maxPerSecond: 1, concurrency: 4 }] } });
    for (const box of ['bx_1', 'bx_2', 'bx_3', 'bx_4']) await t.post(box);
    await target.received(1);
    expect(await t.pauses.pauseByOperator('h')).toBe(true);
    // Every attempt held by the gate has had its turn (one a second) and been looked at.
    await t.dispatcher.whenIdle();
    expect(target.requests).toHaveLength(1);

    expect(await t.pauses.resume('h', 'operator')).toBe(true);
    t.dispatcher.wake('all');
    await target.received(4);
  });

  it('an in-process retry after the answer does not start; the event waits, not failed for good', async () => {
    const target = await hook((_request, index) => (index === 0 ? 503 : 200));
    let pauses!: Pauses;
    const t = await harness({
      url: await url(),
      config: { hooks: [{ name: 'h', url: target.url }] },
      tuning: { quickRetries: 2, quickMinDelayMs: 10 },
      wrap: (sink, index) => async (event, signal, options) => {
        try {
          return await sink.deliver(event, signal, options);
        } catch (error) {
          // Paused (and answered) between the failed attempt and its quick retry.
          if (index() === 1) expect(await pauses.pauseByOperator('h')).toBe(true);
          throw error;
        }
      },
    });
    pauses = t.pauses;
    const id = await t.post('bx_r');
    await target.received(1);
    await waitFor(async () => (await createFanoutStore(t.store.database).exceptions.countBySink('pending')).h === 1, 'the event to wait');
    await t.dispatcher.whenIdle();
    expect(t.started).toEqual([id]);

    expect(await t.pauses.resume('h', 'operator')).toBe(true);
    t.dispatcher.wake('all');
    await target.received(2);
  });

  it('a bus (NATS): no publish after the answer', async () => {
    const names = uniqueNames();
    const client = await natsClient(SHARED_NATS);
    client.streams.push(names.stream);
    cleanups.push(() => client.close());
    const published = collect(client.nc, `${names.prefix}.>`);
    const first = holdFirstAttempt();
    const t = await harness({
      url: await url(),
      config: { natsUrl: SHARED_NATS, natsSubjectPrefix: names.prefix, natsStream: names.stream, natsOrdering: 'per-box' },
      wrap: first.wrap,
    });
    const ids = [await t.post('bx_n'), await t.post('bx_n'), await t.post('bx_n')];
    await first.sent;
    expect(await t.pauses.pauseByOperator('nats')).toBe(true);
    // Admitted before the pause, held before its publish: it waits with the rest.
    first.release();
    await t.dispatcher.whenIdle();
    await client.nc.flush();
    expect(published.messages).toHaveLength(0);
    expect(t.started).toEqual([ids[0]]);

    expect(await t.pauses.resume('nats', 'operator')).toBe(true);
    t.dispatcher.wake('all');
    const messages = await published.received(3);
    expect(messages.map((m) => (m.json() as { id: string }).id)).toEqual(ids);
  });
});

describe.each(engines)('no attempt starts from a lease run out by the holder\'s clock, on $name', ({ url }) => {
  /** A stall: the lease runs out by this process's clock, and another holder takes the partition and moves past the box's events. */
  const stallAndTakeOver = async (t: Harness, clock: ManualClock) => {
    clock.advance(10 * 60_000);
    await t.store.database.kysely
      .updateTable('log_cursors')
      .set({ lease_owner: 'another', lease_until: clock.now() + 60 * 60_000, seq: 1_000_000 })
      .where('sink', '=', 'h')
      .execute();
  };

  it('an entry waiting behind its box, its partition taken over meanwhile: not sent here', async () => {
    const answered = gate();
    const requested = gate();
    const target = await hook(() => (requested.open(), { status: 200, until: answered.opened }));
    const clock = new ManualClock();
    const t = await harness({ url: await url(), clock, config: { hooks: [{ name: 'h', url: target.url, ordering: 'per-box', concurrency: 4 }] } });
    const ids = [await t.post('bx_l'), await t.post('bx_l')];
    // The stall comes while the first request is with the receiver.
    await requested.opened;
    await stallAndTakeOver(t, clock);
    answered.open();
    await target.received(1);
    await t.dispatcher.whenIdle();
    expect(t.started).toEqual([ids[0]]);
  });

  it('a stall between the admission and the request (a slow transform, a paused process): the request does not leave', async () => {
    const target = await hook();
    const clock = new ManualClock();
    let stalled: Promise<void> | undefined;
    const t: Harness = await harness({
      url: await url(),
      clock,
      config: { hooks: [{ name: 'h', url: target.url, ordering: 'per-box', concurrency: 4 }] },
      // Admitted, then stalled past the lease before the sink's request: the hook asks once more as it sends.
      wrap: (sink) => async (event, signal, options) => {
        stalled ??= stallAndTakeOver(t, clock);
        await stalled;
        return sink.deliver(event, signal, options);
      },
    });
    await t.post('bx_s');
    await t.post('bx_s');
    await waitFor(() => t.started.length >= 1, 'the first attempt to reach the sink');
    await stalled;
    await t.dispatcher.whenIdle();
    // The holder that took the partition over sends them; nothing left this process.
    expect(target.requests).toHaveLength(0);
    expect(t.started).toHaveLength(1);
    await target.received(0);
  });

  it('a lease run out by the clock alone: renewed before the next attempt starts', async () => {
    const target = await hook();
    const clock = new ManualClock();
    const order: string[] = [];
    const first = holdFirstAttempt(() => order.push('sent'));
    const t = await harness({
      url: await url(),
      clock,
      config: { hooks: [{ name: 'h', url: target.url, ordering: 'per-box', concurrency: 4 }] },
      wrapStore: (store) => ({
        ...store,
        log: {
          ...store.log,
          acquireParts: (request) => (order.push('renewed'), store.log.acquireParts(request)),
        },
      }),
      wrap: first.wrap,
    });
    await t.post('bx_k');
    await t.post('bx_k');
    await first.sent;
    order.length = 0;
    clock.advance(10 * 60_000);
    first.release();
    await target.received(2);
    // The held attempt reaches its request past its lease: admitted anew (renewed) before it leaves; then the next.
    expect(order).toEqual(['renewed', 'sent', 'sent']);
  });
});

describe.each(engines)('the bookkeeping after a delivery, on $name', ({ url }) => {
  it('a failing write of a delivered attempt\'s outcome is tried again without sending the event again', async () => {
    const target = await hook();
    let failuresLeft = 2;
    let tries = 0;
    const t = await harness({
      url: await url(),
      config: { hooks: [{ name: 'h', url: target.url }] },
      wrapStates: (states) => ({
        ...states,
        async succeeded(sink, longRunSince) {
          tries++;
          if (failuresLeft-- > 0) throw new Error('the database is away');
          return states.succeeded(sink, longRunSince);
        },
      }),
    });
    // The hook failed before (another replica saw it, and says so): its next delivery ends the run of failures (a write).
    await createSinkStates(t.store.database).failed('h', Date.now());
    t.dispatcher.sinkStateChanged('h');
    await t.post('bx_f');
    await waitFor(() => tries >= 3, 'the write to hold');
    await t.dispatcher.whenIdle();
    expect(target.requests).toHaveLength(1);
    expect((await createSinkStates(t.store.database).read('h')).failing_since).toBeNull();
  });
});
