import type { Logger } from '../log.js';
import { DAY_MS, describePrune, type PruneResult } from './prune.js';

/** The timer functions the schedule uses; tests pass their own and fire them by hand. */
export interface Timers {
  setTimeout(callback: () => Promise<void>, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

export const nodeTimers: Timers = {
  setTimeout: (callback, ms) => setTimeout(callback, ms).unref(),
  clearTimeout: (handle) => clearTimeout(handle as NodeJS.Timeout),
};

export interface PruneScheduleOptions {
  prune(): Promise<PruneResult>;
  logger: Logger;
  timers?: Timers;
  /** Delay of the first run: shortly after start, not during it. */
  firstDelayMs?: number;
  intervalMs?: number;
}

export interface PruneSchedule {
  /** Cancels the next run and waits for one in progress, so the database can be closed after. */
  stop(): Promise<void>;
}

/**
 * Daily in-process retention. Runs are chained (the next is planned when one ends), so they never
 * overlap; a failed run is logged and the schedule goes on. Replicas sharing PostgreSQL each prune:
 * the deletes are idempotent.
 */
export function schedulePrune(options: PruneScheduleOptions): PruneSchedule {
  const timers = options.timers ?? nodeTimers;
  const intervalMs = options.intervalMs ?? DAY_MS;
  let handle: unknown;
  let running: Promise<void> | undefined;
  let stopped = false;

  const run = async (): Promise<void> => {
    try {
      const result = await options.prune();
      options.logger.info({ ...result, cutoff: new Date(result.cutoff).toISOString() }, describePrune(result));
    } catch (error) {
      options.logger.error({ err: error }, 'retention prune failed; next attempt at the next run');
    }
  };
  const plan = (ms: number) => {
    handle = timers.setTimeout(() => {
      running = run().finally(() => {
        running = undefined;
        if (!stopped) plan(intervalMs);
      });
      return running;
    }, ms);
  };
  plan(options.firstDelayMs ?? 30_000);

  return {
    async stop() {
      stopped = true;
      timers.clearTimeout(handle);
      await running;
    },
  };
}
