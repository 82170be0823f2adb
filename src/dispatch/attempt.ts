import pRetry from 'p-retry';
import type { CloudEvent } from '../events/cloudevent.js';
import { waitRestOfRetryAfter } from '../retry-after.js';
import { asSinkFailure, type SinkFailure } from '../sinks/failures.js';
import type { Exchange, Sink } from '../sinks/sink.js';
import { jittered, type DispatchTuning } from './tuning.js';

/**
 * `held`: the sink was paused before this run's first attempt started (none was made, the event
 * waits); `lost`: the lease went to another holder before an attempt started (nothing to write down).
 */
export type Outcome =
  | { kind: 'delivered'; attempts: number; failures: number; error: SinkFailure | undefined; skipped: boolean }
  | { kind: 'retry'; attempts: number; failures: number; error: SinkFailure | undefined; nextAttemptAt: number }
  | { kind: 'dead'; attempts: number; failures: number; error: SinkFailure }
  | { kind: 'held'; attempts: number; failures: 0; error: undefined }
  | { kind: 'lost'; attempts: number; failures: number; error: SinkFailure | undefined };

/** The outcome of a run that made its attempts: what the judge weighs. */
export type TriedOutcome = Exclude<Outcome, { kind: 'held' | 'lost' }>;

/** Whether an attempt may start now; else why not: the sink is paused, the lease is another's, the relay stops. */
export type Admission = 'go' | 'paused' | 'lost' | 'stopping';

/**
 * Whether an attempt may start: `admit` before each one (it may wait for a read of the pause state or a
 * renewal of the lease), then `now`, synchronously, as its request leaves. `stale`: what admitted it
 * no longer holds (a stall since, or a wait inside the sink, let the lease run out by this process's
 * clock, or the pause state's read fall out of the fence): it is admitted anew, then made.
 */
export interface AttemptGate {
  admit(): Promise<Admission>;
  now(): Admission | 'stale';
}

/** An attempt refused as it was about to start (see `AttemptGate`): neither an attempt nor a failure. */
export class AttemptRefused extends Error {
  constructor(readonly admission: Exclude<Admission, 'go'> | 'stale') {
    super(`the attempt did not start (${admission})`);
  }
}

export interface AttemptRun {
  sink: Sink;
  event: CloudEvent;
  /** Attempts recorded on the row before this claim. */
  attempts: number;
  /** The claim's lease less its margin: a retry that could not end within it is scheduled in the database. */
  workMs: number;
  tuning: DispatchTuning;
  now(): number;
  /** Stopping: no new attempt starts and in-process waits end (the row is left due). */
  stopping: AbortSignal;
  /** Passed to the sink: cuts an attempt in flight (after the stop grace). */
  cut: AbortSignal;
  /**
   * Asked before each attempt starts (in-process retries too); absent: always `go`. A refusal ends
   * the run with it, the outcome not written down.
   */
  gate?: AttemptGate;
  /**
   * One attempt on the sink (the dispatcher wraps `sink.deliver` in its trace span). `admitted` asks
   * the gate's `admit` again, for a sink that makes the attempt wait before its request; `starting`
   * its `now`, as the request leaves; each throws AttemptRefused on a refusal.
   */
  send(signal: AbortSignal, admitted: () => Promise<void>, starting: () => void, holding: () => void): Promise<Exchange | void | 'skipped'>;
  /** Each attempt's duration in seconds. */
  observe(seconds: number): void;
  /**
   * Each attempt as it ended (`final`: its failure makes the event a dead letter); a failure's
   * outcome counts only once what this returns has resolved, and its rejection ends the run.
   */
  record?(attempt: { at: number; durationMs: number; exchange: Exchange | undefined; failure: SinkFailure | undefined; final: boolean }): Promise<void> | undefined;
}

/**
 * Attempts one event on one sink. A fresh event's retryable failures are retried in process
 * (p-retry: exponential, randomized, with Retry-After as a lower bound) for a few seconds; what is
 * left is a retry scheduled in the database, or a dead letter once the failure is permanent or the
 * sink's attempts are used up.
 */
export async function attemptDelivery(run: AttemptRun): Promise<Outcome> {
  const { sink, tuning } = run;
  let attempts = run.attempts;
  let failures = 0;
  let delivered = false;
  /** The sink made no request: its transform sends nothing for this event (contract section 17). */
  let skipped = false;
  let last: SinkFailure | undefined;

  const backoff = { minTimeout: tuning.quickMinDelayMs, factor: tuning.quickFactor };
  const sinkDown = () => sink.onUp !== undefined && !sink.up();
  // Another attempt starts only while it can end before the lease does (p-retry's maxRetryTime).
  const startBy = Math.max(0, run.workMs - sink.attemptTimeoutMs);
  const started = performance.now();
  const mayRetryNow = (failure: SinkFailure) =>
    failure.retryable &&
    attempts < sink.maxAttempts &&
    (failure.retryAfterMs ?? 0) <= Math.min(tuning.quickMaxDelayMs, startBy - (performance.now() - started)) &&
    !sinkDown();

  /** A failed attempt that could not be recorded, or an admission that failed: the run ends with it, and the outcome is not written down. */
  let unrecorded: { error: unknown } | undefined;
  /** Why the next attempt did not start: the run makes no more. */
  let refused: Exclude<Admission, 'go'> | undefined;
  const admitted = async () => {
    const admission = (await run.gate?.admit()) ?? 'go';
    if (admission !== 'go') throw new AttemptRefused(admission);
  };
  const starting = () => {
    const admission = run.gate?.now() ?? 'go';
    if (admission !== 'go') throw new AttemptRefused(admission);
  };
  const holding = () => {
    const admission = run.gate?.now() ?? 'go';
    if (admission !== 'go' && admission !== 'stopping') throw new AttemptRefused(admission);
  };
  const recordFailure = async (failure: SinkFailure, at: number, durationMs: number) => {
    try {
      await run.record?.({ at, durationMs, exchange: failure.exchange, failure, final: !failure.retryable || attempts >= sink.maxAttempts });
    } catch (error) {
      unrecorded = { error };
    }
  };

  const attemptOnce = async (): Promise<void> => {
    try {
      await admitted();
    } catch (error) {
      // `admit` answers no `stale`: it waits until it knows.
      if (error instanceof AttemptRefused) refused = error.admission as Exclude<Admission, 'go'>;
      else unrecorded = { error };
      throw error;
    }
    attempts++;
    const at = run.now();
    const started = performance.now();
    try {
      const sent = await run.send(run.cut, admitted, starting, holding);
      skipped = sent === 'skipped';
      delivered = true;
      const durationMs = performance.now() - started;
      run.observe(durationMs / 1000);
      // A transform that sent nothing made no request: not an attempt to show.
      if (sent !== 'skipped') void run.record?.({ at, durationMs, exchange: sent || undefined, failure: undefined, final: false });
    } catch (error) {
      if (error instanceof AttemptRefused) {
        // Refused after a wait inside the sink: no request was made.
        attempts--;
        if (error.admission === 'stale') return attemptOnce();
        refused = error.admission;
        throw error;
      }
      const durationMs = performance.now() - started;
      run.observe(durationMs / 1000);
      // Cut by shutdown: the sink was not given its chance, so this is neither an attempt nor a
      // failure; the row is released and sent again by the next process.
      if (run.cut.aborted) {
        attempts--;
        throw error;
      }
      failures++;
      last = asSinkFailure(error);
      await recordFailure(last, at, durationMs);
      throw last;
    }
  };

  // The first attempt goes without p-retry (most succeed; p-retry builds its options and promise
  // chain at every call). A failure is handed to p-retry as its first attempt's, so what follows
  // (waits, retries, limits) is p-retry's as before.
  let firstFailure: { error: unknown } | undefined;
  if (!run.stopping.aborted) {
    try {
      await attemptOnce();
    } catch (error) {
      firstFailure = { error };
    }
  }
  if (firstFailure && !unrecorded && !refused) {
    const failed = firstFailure;
    try {
      await pRetry(
        async (attemptNumber) => {
          if (attemptNumber === 1) throw failed.error;
          await attemptOnce();
        },
        {
          // Only a fresh event is retried in process; a scheduled retry is one attempt per claim.
          retries: run.attempts === 0 ? tuning.quickRetries : 0,
          ...backoff,
          randomize: true,
          maxRetryTime: Math.max(0, startBy - (performance.now() - started)),
          signal: run.stopping,
          shouldRetry: ({ error }) => !unrecorded && !refused && mayRetryNow(error as SinkFailure),
          onFailedAttempt: async ({ error, retriesLeft, retriesConsumed }) => {
            const failure = error as SinkFailure;
            if (retriesLeft === 0 || unrecorded || refused || !mayRetryNow(failure)) return;
            await waitRestOfRetryAfter(failure.retryAfterMs, backoff, retriesConsumed, run.stopping);
          },
        },
      );
    } catch {
      // The outcome is decided from what the attempts did, below.
    }
  }
  if (unrecorded) throw unrecorded.error;
  if (refused === 'lost') return { kind: 'lost', attempts, failures, error: last };
  // p-retry also throws when a stop arrives after the last attempt succeeded.
  if (delivered) return { kind: 'delivered', attempts, failures, error: last, skipped };
  if (refused === 'paused' && !last) return { kind: 'held', attempts, failures: 0, error: undefined };
  const now = run.now();
  if (!last) return { kind: 'retry', attempts, failures, error: undefined, nextAttemptAt: now };
  if (!last.retryable || attempts >= sink.maxAttempts) return { kind: 'dead', attempts, failures, error: last };
  // A sink known to be down is waited for (its lane claims nothing until it is back), not backed off.
  const delay = run.stopping.aborted || sinkDown() ? 0 : jittered(tuning.retryDelayMs(attempts));
  const retryAfter = Math.min(last.retryAfterMs ?? 0, tuning.maxRetryAfterMs);
  return { kind: 'retry', attempts, failures, error: last, nextAttemptAt: now + Math.max(delay, retryAfter) };
}
