import { describe, expect, it } from 'vitest';
import { attemptDelivery, type AttemptRun } from '../src/dispatch/attempt.js';
import { defaultTuning } from '../src/dispatch/tuning.js';
import { toCloudEvent } from '../src/events/cloudevent.js';
import { HookConnectionError, HookRejectedError, HookUnavailableError, type SinkFailure } from '../src/sinks/failures.js';
import type { Sink } from '../src/sinks/sink.js';

const event = toCloudEvent(JSON.stringify({ id: 'evt_1', type: 'box.ready', createdAt: '2026-11-25T10:00:00Z', data: { box: { id: 'box_1' } } }), 'urn:test');

/** A sink that answers each attempt from `answers` in turn (undefined: delivered), noting when each began. */
function scriptedSink(answers: (SinkFailure | undefined)[]) {
  const startedAt: number[] = [];
  const sink: Sink = {
    name: 'hook',
    concurrency: 1,
    maxAttempts: 8,
    attemptTimeoutMs: 1000,
    async deliver() {
      startedAt.push(performance.now());
      const answer = answers[startedAt.length - 1];
      if (answer) throw answer;
    },
    up: () => true,
    close: async () => {},
  };
  return { sink, startedAt };
}

function runOf(sink: Sink, overrides: Partial<AttemptRun> = {}): AttemptRun {
  return {
    sink,
    event,
    attempts: 0,
    workMs: 60_000,
    tuning: { ...defaultTuning, quickRetries: 2, quickMinDelayMs: 20, quickFactor: 2 },
    now: () => 1_000_000,
    stopping: new AbortController().signal,
    cut: new AbortController().signal,
    send: (signal) => sink.deliver(event, signal),
    observe: () => {},
    ...overrides,
  };
}

describe('attempting one event', () => {
  it('delivered at the first attempt: one call, nothing failed', async () => {
    const { sink, startedAt } = scriptedSink([undefined]);
    const observed: number[] = [];
    const outcome = await attemptDelivery(runOf(sink, { observe: (seconds) => observed.push(seconds) }));
    expect(outcome).toEqual({ kind: 'delivered', attempts: 1, failures: 0, error: undefined, skipped: false });
    expect(startedAt).toHaveLength(1);
    expect(observed).toHaveLength(1);
  });

  it("retries a first failure after p-retry's backoff, then each later one after a longer one", async () => {
    const first = new HookConnectionError('ECONNREFUSED');
    const { sink, startedAt } = scriptedSink([first, new HookConnectionError('ECONNRESET'), undefined]);
    const outcome = await attemptDelivery(runOf(sink));
    expect(outcome).toMatchObject({ kind: 'delivered', attempts: 3, failures: 2 });
    expect(startedAt).toHaveLength(3);
    // Randomized: 20-40 ms before the second attempt, 40-80 ms before the third.
    expect(startedAt[1]! - startedAt[0]!).toBeGreaterThanOrEqual(19);
    expect(startedAt[2]! - startedAt[1]!).toBeGreaterThanOrEqual(39);
  });

  it("waits a first failure's Retry-After before the second attempt", async () => {
    const { sink, startedAt } = scriptedSink([new HookUnavailableError(503, 150), undefined]);
    const outcome = await attemptDelivery(runOf(sink));
    expect(outcome).toMatchObject({ kind: 'delivered', attempts: 2, failures: 1 });
    expect(startedAt[1]! - startedAt[0]!).toBeGreaterThanOrEqual(149);
  });

  it('after the quick retries, schedules the next attempt in the database with the last failure', async () => {
    const failures = [new HookConnectionError('ECONNREFUSED'), new HookConnectionError('ECONNREFUSED'), new HookUnavailableError(502, undefined)];
    const { sink, startedAt } = scriptedSink(failures);
    const outcome = await attemptDelivery(runOf(sink));
    expect(startedAt).toHaveLength(3);
    expect(outcome).toMatchObject({ kind: 'retry', attempts: 3, failures: 3, error: failures[2] });
    // The wait scheduled after three attempts (10 minutes, jittered 0.8-1.2).
    if (outcome.kind !== 'retry') throw new Error('expected a retry');
    expect(outcome.nextAttemptAt - 1_000_000).toBeGreaterThanOrEqual(480_000);
    expect(outcome.nextAttemptAt - 1_000_000).toBeLessThanOrEqual(720_000);
  });

  it('a permanent failure at the first attempt is a dead letter, not retried', async () => {
    const refused = new HookRejectedError(410);
    const { sink, startedAt } = scriptedSink([refused, undefined]);
    expect(await attemptDelivery(runOf(sink))).toEqual({ kind: 'dead', attempts: 1, failures: 1, error: refused });
    expect(startedAt).toHaveLength(1);
  });

  it('a scheduled retry (attempts already made) is one attempt', async () => {
    const { sink, startedAt } = scriptedSink([new HookConnectionError('ECONNREFUSED'), undefined]);
    const outcome = await attemptDelivery(runOf(sink, { attempts: 3 }));
    expect(startedAt).toHaveLength(1);
    expect(outcome).toMatchObject({ kind: 'retry', attempts: 4, failures: 1 });
  });

  it('stopping before the first attempt sends nothing and leaves the event due now', async () => {
    const { sink, startedAt } = scriptedSink([undefined]);
    const outcome = await attemptDelivery(runOf(sink, { stopping: AbortSignal.abort() }));
    expect(startedAt).toHaveLength(0);
    expect(outcome).toEqual({ kind: 'retry', attempts: 0, failures: 0, error: undefined, nextAttemptAt: 1_000_000 });
  });

  it('a stop during a failed first attempt makes no second one', async () => {
    const stopping = new AbortController();
    const { sink, startedAt } = scriptedSink([new HookConnectionError('ECONNREFUSED'), undefined]);
    const outcome = await attemptDelivery(
      runOf(sink, {
        stopping: stopping.signal,
        send: async (signal) => {
          stopping.abort();
          await sink.deliver(event, signal);
        },
      }),
    );
    expect(startedAt).toHaveLength(1);
    expect(outcome).toMatchObject({ kind: 'retry', attempts: 1, failures: 1, nextAttemptAt: 1_000_000 });
  });

  it('an attempt cut by shutdown is neither an attempt nor a failure, and is not tried again here', async () => {
    const cut = new AbortController();
    const { sink, startedAt } = scriptedSink([undefined]);
    const outcome = await attemptDelivery(
      runOf(sink, {
        attempts: 2,
        cut: cut.signal,
        send: async () => {
          startedAt.push(performance.now());
          cut.abort();
          throw new DOMException('cut at the end of the grace', 'AbortError');
        },
      }),
    );
    expect(startedAt).toHaveLength(1);
    expect(outcome).toEqual({ kind: 'retry', attempts: 2, failures: 0, error: undefined, nextAttemptAt: 1_000_000 });
  });
});

describe('recording each attempt', () => {
  it('hands each attempt to record: a failure (final when the last) is stored before the run goes on, then the success', async () => {
    const { sink, startedAt } = scriptedSink([new HookUnavailableError(503, undefined), undefined]);
    const recorded: { failure: string | undefined; final: boolean; at: number }[] = [];
    let stored!: () => void;
    const failureStored = new Promise<void>((resolve) => (stored = resolve));
    const running = attemptDelivery(
      runOf(sink, {
        record: (attempt) => {
          recorded.push({ failure: attempt.failure?.code, final: attempt.final, at: attempt.at });
          return attempt.failure ? failureStored : undefined;
        },
      }),
    );
    // Well past the quick retry's delay (20 ms): no second attempt while the failure is being stored.
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect([recorded.length, startedAt.length]).toEqual([1, 1]);
    stored();
    expect(await running).toMatchObject({ kind: 'delivered', attempts: 2, failures: 1 });
    expect(recorded).toEqual([
      { failure: 'http_503', final: false, at: 1_000_000 },
      { failure: undefined, final: false, at: 1_000_000 },
    ]);

    const refused = scriptedSink([new HookRejectedError(422)]);
    const finals: boolean[] = [];
    await attemptDelivery(runOf(refused.sink, { record: (attempt) => void finals.push(attempt.final) }));
    expect(finals).toEqual([true]);
  });

  it('a failure that cannot be recorded ends the run with that error: no outcome counts, no retry is made', async () => {
    const { sink, startedAt } = scriptedSink([new HookUnavailableError(503, undefined), undefined]);
    const storageDown = new Error('disk full');
    await expect(attemptDelivery(runOf(sink, { record: (attempt) => (attempt.failure ? Promise.reject(storageDown) : undefined) }))).rejects.toBe(storageDown);
    expect(startedAt).toHaveLength(1);
  });
});
