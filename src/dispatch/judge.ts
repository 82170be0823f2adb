import type { Clock } from '../clock.js';
import type { Logger } from '../log.js';
import { EventFailure } from '../sinks/failures.js';
import type { Sink } from '../sinks/sink.js';
import { splitAccountKey } from '../store/account-keys.js';
import type { SinkState } from '../store/state/sink-state.js';
import { logFieldsOf } from '../tracing/tracing.js';
import type { TriedOutcome } from './attempt.js';
import type { DispatchMetrics } from './dispatcher.js';
import type { OperatorEvents } from './operator-events.js';
import type { SinkHealth } from './sink-health.js';
import type { Trial, Verdict, Work } from './work.js';

/** What the outcome of an event's attempts means for the sink, and the dead letter's announcement. */
export interface Judge {
  /**
   * The verdict the caller writes down (to a claimed row, or as an outbox row of a log entry), after
   * the sink's pause bookkeeping, metrics and logs.
   */
  judge(sink: Sink, work: Work, outcome: TriedOutcome, trial: Trial, state: SinkState): Promise<Verdict>;
  /** A dead letter is counted, logged and announced once it is written down. */
  deadLettered(sink: Sink, work: Work, verdict: Extract<Verdict, { kind: 'dead' }>): Promise<void>;
}

export interface JudgeDeps {
  health: SinkHealth;
  metrics: DispatchMetrics;
  operatorEvents: OperatorEvents;
  clock: Clock;
  log: Logger;
}

export function createJudge({ health, metrics, operatorEvents, clock, log }: JudgeDeps): Judge {
  return {
    async judge(sink, work, outcome, trial, state) {
      const labels = { sink: sink.name };
      // A skipped event, or one its transform fails on, tells nothing of the sink: no pause bookkeeping, no waiting.
      const aboutSink = outcome.kind === 'delivered' ? !outcome.skipped : !(outcome.error instanceof EventFailure);
      const paused = aboutSink && (await health.track(sink, outcome, trial, state));
      const now = clock.now();
      const context = { sink: sink.name, eventId: work.eventId, outboxId: work.rowId, attempts: outcome.attempts, ...logFieldsOf(work.traceparent) };
      if (outcome.kind !== 'delivered' && outcome.error && paused) {
        // A paused sink's work waits: not dead-lettered, and its attempts while paused do not count.
        metrics.sinkDeliveries.inc({ ...labels, outcome: 'retried' }, outcome.failures);
        log.info({ ...context, error: outcome.error.summary }, 'delivery failed while the sink is paused; the event waits');
        return { kind: 'wait', attempts: work.attempts, lastError: outcome.error.summary, nextAttemptAt: now, now };
      }
      const dead = outcome.kind === 'dead';
      metrics.sinkDeliveries.inc({ ...labels, outcome: 'retried' }, outcome.failures - (dead ? 1 : 0));
      if (outcome.kind === 'delivered') {
        metrics.sinkDeliveries.inc({ ...labels, outcome: outcome.skipped ? 'skipped' : 'delivered' });
        return { kind: 'delivered', attempts: outcome.attempts, lastError: outcome.error?.summary ?? null, now };
      }
      if (outcome.kind === 'dead') return { kind: 'dead', attempts: outcome.attempts, lastError: outcome.error.summary, now };
      if (!outcome.error) return { kind: 'undone' };
      log.info({ ...context, error: outcome.error.summary, nextAttemptAt: new Date(outcome.nextAttemptAt).toISOString() }, 'delivery failed; retry scheduled');
      return { kind: 'wait', attempts: outcome.attempts, lastError: outcome.error.summary, nextAttemptAt: outcome.nextAttemptAt, now };
    },

    async deadLettered(sink, work, verdict) {
      metrics.sinkDeliveries.inc({ sink: sink.name, outcome: 'dead_lettered' });
      log.warn(
        { sink: sink.name, eventId: work.eventId, outboxId: work.rowId, attempts: verdict.attempts, error: verdict.lastError, ...logFieldsOf(work.traceparent) },
        'delivery failed for good: dead letter',
      );
      // Operator events that fail are not announced again: that could loop.
      if (work.origin === 'operator') return;
      // The announcement is of the event's account, so its ids read as that account's events' do: the upstream's.
      const { account, id: eventId } = splitAccountKey(work.eventId);
      await operatorEvents.announce({
        type: 'boxrelay.event.dead_lettered',
        subject: work.boxId === null ? undefined : splitAccountKey(work.boxId).id,
        about: sink.name,
        account,
        data: { eventId, sink: sink.name, attempts: verdict.attempts, lastError: verdict.lastError },
      });
    },
  };
}
