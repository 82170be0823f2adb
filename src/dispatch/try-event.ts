import type { Clock } from '../clock.js';
import type { Exchange, Sink } from '../sinks/sink.js';
import type { SinkState } from '../store/state/sink-state.js';
import type { Tracing } from '../tracing/tracing.js';
import { attemptDelivery, type AttemptGate } from './attempt.js';
import type { AttemptRecorder } from './attempt-recorder.js';
import type { DispatchMetrics } from './dispatcher.js';
import type { Judge } from './judge.js';
import type { recentEvents } from './recent-events.js';
import type { DispatchTuning } from './tuning.js';
import { STOPPED, type UntilStored } from './until-stored.js';
import type { Trial, Verdict, Work } from './work.js';

/**
 * Attempts one event on a sink, each attempt started only once `gate` says so; `changed` when that
 * may have changed the sink's pause state.
 */
export type TryEvent = (
  sink: Sink,
  work: Work,
  workMs: number,
  trial: Trial,
  state: SinkState,
  gate: AttemptGate,
) => Promise<{ verdict: Verdict; changed: boolean }>;

export interface TryEventDeps {
  /** An event's CloudEvent, built once for all its sinks. */
  eventOf: ReturnType<typeof recentEvents>;
  judge: Judge;
  tracing: Tracing;
  tuning: DispatchTuning;
  clock: Clock;
  metrics: DispatchMetrics;
  /** No new attempt starts, and in-process waits end. */
  stopping: AbortSignal;
  /** Cuts attempts in flight (after the stop's grace). */
  cut: AbortSignal;
  /** Writes each attempt down (contract section 16); none when attempts are not recorded. */
  attempts?: AttemptRecorder | undefined;
  /** The pause bookkeeping of an outcome is tried until it holds: the attempts are not made again for it. */
  untilStored: UntilStored;
}

export function createTryEvent({ eventOf, judge, tracing, tuning, clock, metrics, stopping, cut, attempts, untilStored }: TryEventDeps): TryEvent {
  return async (sink, work, workMs, trial, state, gate) => {
    const event = eventOf(work.eventId, work.payload, work.origin);
    /** Each attempt is a span in the trace of the delivery that stored the event. */
    const send = async (signal: AbortSignal, admitted: () => Promise<void>, starting: () => void, holding: () => void): Promise<Exchange | void | 'skipped'> => {
      const origin = { row: work.rowId === undefined ? undefined : { id: work.rowId, version: work.rowVersion ?? 0 }, heldAs: work.heldAs };
      // Asked here for every sink; a sink with work of its own before its request (a hook) asks again then.
      starting();
      // Off: no span name (a NATS subject) or attributes built per attempt for nothing.
      if (!tracing.enabled) return sink.deliver(event, signal, { ...origin, admit: admitted, starting, holding });
      const span = tracing.child(sink.spanName?.(event) ?? sink.name, sink.spanKind ?? 'client', work.traceparent, {
        'boxrelay.sink': sink.name,
        'boxrelay.delivery_id': event.id,
        'boxrelay.event_type': event.type,
      });
      try {
        const sent = await sink.deliver(event, signal, { traceparent: span.traceparent, ...origin, admit: admitted, starting, holding });
        span.end();
        return sent;
      } catch (error) {
        span.end({ 'error.type': (error as { code?: string }).code ?? 'sink_error' }, error);
        throw error;
      }
    };
    const outcome = await attemptDelivery({
      send,
      sink,
      event,
      attempts: work.attempts,
      workMs,
      gate,
      // A probe is one attempt: it tells whether the sink is back, not more.
      tuning: trial === 'probe' ? { ...tuning, quickRetries: 0 } : tuning,
      now: () => clock.now(),
      stopping,
      cut,
      observe: (seconds) => metrics.sinkDeliveryDuration.observe({ sink: sink.name }, seconds),
      // A paused sink's failures wait rather than dead-letter.
      record: (ended) => attempts?.record({ ...ended, sink: sink.name, eventId: work.eventId, final: ended.final && trial !== 'probe' && state.paused_at === null }),
    });
    if (outcome.kind === 'lost') return { verdict: { kind: 'lost' }, changed: false };
    // Nothing was tried: nothing to judge; the state that held it back is read again.
    if (outcome.kind === 'held') return { verdict: { kind: 'held', now: clock.now() }, changed: true };
    const judged = await untilStored('write down the pause bookkeeping of an attempt', () => judge.judge(sink, work, outcome, trial, state), {
      sink: sink.name,
      eventId: work.eventId,
    });
    // Stopped before it held: the event is sent again by the next holder (at least once).
    const verdict: Verdict = judged === STOPPED ? { kind: 'undone' } : judged;
    return { verdict, changed: trial === 'probe' || outcome.kind !== 'delivered' || state.failing_since !== null };
  };
}
