import type { Clock } from '../clock.js';
import type { Logger } from '../log.js';
import type { Sink } from '../sinks/sink.js';
import type { SinkState, SinkStates } from '../store/state/sink-state.js';
import type { TriedOutcome } from './attempt.js';
import type { Pauses } from './pauses.js';
import type { Trial } from './work.js';

/** A sink's run of failures and its pause, kept from the outcomes of its attempts. */
export interface SinkHealth {
  /**
   * Pause bookkeeping of one attempt's outcome: a delivery ends a run of failures (and a probe's
   * success resumes the sink); a failure may pause it. Returns whether the sink is paused now.
   */
  track(sink: Sink, outcome: TriedOutcome, trial: Trial, state: SinkState): Promise<boolean>;
}

export interface SinkHealthDeps {
  sinkStates: SinkStates;
  pauses: Pauses;
  /** Makes a recovered sink's backed-off work due now. */
  makeDue(sink: string, now: number): Promise<void>;
  clock: Clock;
  /** A run of failures at least this long, ended by a delivery, makes the sink's waiting work due. */
  recoverAfterMs: number;
  log: Logger;
}

export function createSinkHealth({ sinkStates, pauses, makeDue, clock, recoverAfterMs, log }: SinkHealthDeps): SinkHealth {
  /** Sinks this process saw fail since its last success there: their next success clears `failing_since`. */
  const failingSeen = new Set<string>();
  return {
    async track(sink, outcome, trial, state) {
      if (outcome.kind === 'delivered') {
        if (trial === 'probe') await pauses.resume(sink.name, 'probe');
        else if (state.failing_since !== null || failingSeen.has(sink.name)) {
          failingSeen.delete(sink.name);
          if (await sinkStates.succeeded(sink.name, clock.now() - recoverAfterMs)) {
            // Recovered: what was backed off while it failed is due now (as a resume does), not after the rest of its wait.
            await makeDue(sink.name, clock.now());
            log.info({ sink: sink.name }, 'the sink delivers again after failing: its waiting work is due now');
          }
        }
        return false;
      }
      if (!outcome.error) return state.paused_at !== null;
      const now = clock.now();
      failingSeen.add(sink.name);
      const failing = await sinkStates.failed(sink.name, now);
      const pauseAfterMs = sink.pauseAfterMs ?? 0;
      if (pauseAfterMs <= 0) return failing.paused_at !== null;
      if (failing.paused_at !== null) return true;
      if (failing.failing_since === null || now - failing.failing_since < pauseAfterMs) return false;
      await pauses.pauseForFailures(sink.name, { failingSince: failing.failing_since, lastError: outcome.error.summary });
      return true;
    },
  };
}
