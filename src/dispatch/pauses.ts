import { setTimeout as sleep } from 'node:timers/promises';
import type { Clock } from '../clock.js';
import type { Logger } from '../log.js';
import type { AuditNote } from '../store/state/audit.js';
import type { SinkStates } from '../store/state/sink-state.js';
import type { OperatorEvents } from './operator-events.js';

/**
 * The pause fence: a lane starts an attempt only with a pause state whose read began less than this
 * long before, so a pause stored and then waited out for this long reaches every lane of every
 * replica before its answer, whatever their threads and clocks.
 */
export const PAUSE_FENCE_MS = 1000;

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
  /** Tells the dispatcher of this process, resolving once it has taken the change. */
  changed(sink: string): Promise<void>;
  /**
   * Other replicas may be sending (PostgreSQL): an operator's pause is answered only once the fence
   * has passed. Alone (SQLite), once this process's dispatcher has taken it, or the fence passed first.
   */
  replicated: boolean;
}

/** The fence's wait, which can be called off once it is not needed. */
interface Fence {
  passed: Promise<void>;
  cancel(): void;
}

function startFence(): Fence {
  const stop = new AbortController();
  return {
    passed: sleep(PAUSE_FENCE_MS, undefined, { signal: stop.signal }).catch(() => {}),
    cancel: () => stop.abort(),
  };
}

/** Pausing and resuming sinks (contract section 5), shared by the dispatcher and the admin API; each change is announced once. */
export function createPauses({ sinkStates, makeDue, operatorEvents, clock, logger, changed, replicated }: PausesDeps): Pauses {
  const log = logger.child({ part: 'dispatch' });
  /**
   * Tells this process's dispatcher of the change just stored; resolves once it has taken it, or
   * once the fence has passed (a worker that did not confirm by then cannot start an attempt with
   * the state before: its lanes read it again first).
   */
  const told = async (sink: string, fence?: Fence): Promise<void> => {
    const own = fence ?? startFence();
    await Promise.race([changed(sink), own.passed]);
    // Not left running: a pending timer would hold a stopping process for up to the fence.
    if (!fence) own.cancel();
  };
  return {
    async pauseForFailures(sink, { failingSince, lastError }) {
      if (!(await sinkStates.pause(sink, 'failures', clock.now()))) return false;
      await told(sink);
      const since = new Date(failingSince).toISOString();
      log.warn({ sink, failingSince: since, lastError }, 'every attempt failed for the pause time: sink paused, its work waits; one probe a minute');
      await operatorEvents.announce({ type: 'boxrelay.sink.paused', subject: sink, about: sink, data: { sink, by: 'failures', failingSince: since, lastError } });
      return true;
    },

    async pauseByOperator(sink, audit) {
      if (!(await sinkStates.pause(sink, 'operator', clock.now(), audit))) return false;
      // The answer is the promise that nothing starts after it: with replicas, it waits the fence out.
      const fence = startFence();
      await told(sink, fence);
      if (replicated) await fence.passed;
      fence.cancel();
      log.warn({ sink }, 'sink paused by an operator; its work waits until resumed');
      await operatorEvents.announce({ type: 'boxrelay.sink.paused', subject: sink, about: sink, data: { sink, by: 'operator' } });
      return true;
    },

    async resume(sink, by, audit) {
      if (!(await sinkStates.resume(sink, by, audit))) return false;
      await makeDue(sink, clock.now());
      await told(sink);
      log.info({ sink, by }, 'sink resumed');
      await operatorEvents.announce({ type: 'boxrelay.sink.resumed', subject: sink, about: sink, data: { sink, by } });
      return true;
    },
  };
}
