import { setTimeout as sleep } from 'node:timers/promises';
import type { Clock } from '../clock.js';
import type { Logger } from '../log.js';
import type { AuditNote } from '../store/state/audit.js';
import type { SinkStates } from '../store/state/sink-state.js';
import type { OperatorEvents } from './operator-events.js';

/** How often a pause looks again for lanes that have not acknowledged it: the first looks come quickly, then at most this often. */
const FENCE_LOOK_MAX_MS = 100;

export interface Pauses {
  /** The sink failed every attempt for its `pauseAfter`: paused, probed once a minute. True when this call paused it. */
  pauseForFailures(sink: string, detail: { failingSince: number; lastError: string }): Promise<boolean>;
  /**
   * `POST /admin/sinks/:name/pause`: paused until resumed by hand (no probes). `audit` is written
   * with the change. Resolves once the pause holds on every replica (a repeated pause too): true
   * when this call paused it.
   */
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
  /** Tells the dispatcher of this process, so its lanes learn the change at once rather than at their next renewal. */
  changed(sink: string): Promise<void>;
}

/** Pausing and resuming sinks (contract section 5), shared by the dispatcher and the admin API; each change is announced once. */
export function createPauses({ sinkStates, makeDue, operatorEvents, clock, logger, changed }: PausesDeps): Pauses {
  const log = logger.child({ part: 'dispatch' });
  const tell = (sink: string): void =>
    void changed(sink).catch((error: unknown) => log.error({ err: error, sink }, 'could not tell the fan-out of a pause or a resume; its lanes learn it at their next renewal'));
  /**
   * The fence: every lane serving the sink, on any replica, has acknowledged the state of `epoch` (or
   * newer), or its lease has ended by the lease clock; a lane sends only by the state it acknowledged
   * and only while its lease runs, so nothing starts by an older state from here on.
   */
  const fenced = async (sink: string, epoch: number): Promise<void> => {
    for (let wait = 5; (await sinkStates.lanesBehind(sink, epoch, clock.now())) > 0; wait = Math.min(2 * wait, FENCE_LOOK_MAX_MS)) await sleep(wait);
  };
  return {
    async pauseForFailures(sink, { failingSince, lastError }) {
      if (!(await sinkStates.pause(sink, 'failures', clock.now()))) return false;
      tell(sink);
      const since = new Date(failingSince).toISOString();
      log.warn({ sink, failingSince: since, lastError }, 'every attempt failed for the pause time: sink paused, its work waits; one probe a minute');
      await operatorEvents.announce({ type: 'boxrelay.sink.paused', subject: sink, about: sink, data: { sink, by: 'failures', failingSince: since, lastError } });
      return true;
    },

    async pauseByOperator(sink, audit) {
      const paused = await sinkStates.pause(sink, 'operator', clock.now(), audit);
      tell(sink);
      // The answer is the promise that nothing starts after it, whoever stored the pause (a repeat, a
      // second replica's at the same time): the fence of the state read now, which has the pause or is newer.
      await fenced(sink, (await sinkStates.read(sink)).epoch);
      if (!paused) return false;
      log.warn({ sink }, 'sink paused by an operator; its work waits until resumed');
      await operatorEvents.announce({ type: 'boxrelay.sink.paused', subject: sink, about: sink, data: { sink, by: 'operator' } });
      return true;
    },

    async resume(sink, by, audit) {
      if (!(await sinkStates.resume(sink, by, audit))) return false;
      await makeDue(sink, clock.now());
      tell(sink);
      log.info({ sink, by }, 'sink resumed');
      await operatorEvents.announce({ type: 'boxrelay.sink.resumed', subject: sink, about: sink, data: { sink, by } });
      return true;
    },
  };
}
