import { DAY_MS } from '../../clock.js';
import type { Logger } from '../../log.js';
import { scheduleRepeating, type Schedule, type Timers } from '../../schedule.js';
import { describePrune, type PruneResult } from './prune.js';

export type { Timers };
export type PruneSchedule = Schedule;

export interface PruneScheduleOptions {
  /** One run; `signal` aborts when the schedule stops, so a long run does not hold up shutdown. */
  prune(signal: AbortSignal): Promise<PruneResult>;
  logger: Logger;
  timers?: Timers | undefined;
  /** Delay of the first run: shortly after start, not during it. */
  firstDelayMs?: number;
  intervalMs?: number;
}

/**
 * Daily in-process retention; a failed step or run is logged and the schedule goes on. Replicas sharing
 * PostgreSQL each prune: the deletes are idempotent.
 */
export function schedulePrune(options: PruneScheduleOptions): PruneSchedule {
  return scheduleRepeating(
    async (signal) => {
      const started = performance.now();
      const result = await options.prune(signal);
      const durationMs = Math.round(performance.now() - started);
      const fields = { ...result, cutoff: new Date(result.cutoff).toISOString(), durationMs };
      // Each failed step was logged as it failed; the pass's line says it was not whole.
      if (result.failedSteps.length > 0) options.logger.warn(fields, describePrune(result));
      else options.logger.info(fields, describePrune(result));
    },
    {
      timers: options.timers,
      firstDelayMs: options.firstDelayMs ?? 30_000,
      intervalMs: options.intervalMs ?? DAY_MS,
      onError: (error) => options.logger.error({ err: error }, 'retention prune failed; next attempt at the next run'),
    },
  );
}
