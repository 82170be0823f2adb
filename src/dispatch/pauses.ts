import type { Clock } from '../clock.js';
import type { Logger } from '../log.js';
import type { AuditNote } from '../store/state/audit.js';
import type { SinkStates } from '../store/state/sink-state.js';
import type { OperatorEvents } from './operator-events.js';

export interface Pauses {
  /** The sink failed every attempt for its `pauseAfter`: paused, probed once a minute. True when this call paused it. */
  pauseForFailures(sink: string, detail: { failingSince: number; lastError: string }): Promise<boolean>;
  /** `POST /admin/sinks/:name/pause`: paused until resumed by hand (no probes). `audit` is written with the change. */
  pauseByOperator(sink: string, audit?: AuditNote): Promise<boolean>;
  /** A probe succeeded, or `POST /admin/sinks/:name/resume`: its pending work is due at once. True when it was paused. */
  resume(sink: string, by: 'probe' | 'operator', audit?: AuditNote): Promise<boolean>;
}

export interface PausesDeps {
  sinkStates: SinkStates;
  /** Makes a resumed sink's pending work due now (it was backed off while failing). */
  makeDue(sink: string, now: number): Promise<void>;
  operatorEvents: OperatorEvents;
  clock: Clock;
  logger: Logger;
  /**
   * Tells the dispatcher of this process, resolving once it has taken the change, so that what was sent
   * after a pause's answer was read with the pause (other replicas see a change within their poll interval).
   */
  changed(sink: string): Promise<void>;
}

/** Pausing and resuming sinks (contract section 5), shared by the dispatcher and the admin API; each change is announced once. */
export function createPauses({ sinkStates, makeDue, operatorEvents, clock, logger, changed }: PausesDeps): Pauses {
  const log = logger.child({ part: 'dispatch' });
  return {
    async pauseForFailures(sink, { failingSince, lastError }) {
      if (!(await sinkStates.pause(sink, 'failures', clock.now()))) return false;
      await changed(sink);
      const since = new Date(failingSince).toISOString();
      log.warn({ sink, failingSince: since, lastError }, 'every attempt failed for the pause time: sink paused, its work waits; one probe a minute');
      await operatorEvents.announce({ type: 'boxrelay.sink.paused', subject: sink, about: sink, data: { sink, by: 'failures', failingSince: since, lastError } });
      return true;
    },

    async pauseByOperator(sink, audit) {
      if (!(await sinkStates.pause(sink, 'operator', clock.now(), audit))) return false;
      await changed(sink);
      log.warn({ sink }, 'sink paused by an operator; its work waits until resumed');
      await operatorEvents.announce({ type: 'boxrelay.sink.paused', subject: sink, about: sink, data: { sink, by: 'operator' } });
      return true;
    },

    async resume(sink, by, audit) {
      if (!(await sinkStates.resume(sink, by, audit))) return false;
      await makeDue(sink, clock.now());
      await changed(sink);
      log.info({ sink, by }, 'sink resumed');
      await operatorEvents.announce({ type: 'boxrelay.sink.resumed', subject: sink, about: sink, data: { sink, by } });
      return true;
    },
  };
}
