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
  /** One run; `signal` aborts when the schedule stops, so a long run does not hold up shutdown. */
  prune(signal: AbortSignal): Promise<PruneResult>;
  logger: Logger;
  timers?: Timers;
  /** Delay of the first run: shortly after start, not during it. */
  firstDelayMs?: number;
  intervalMs?: number;
}

export interface PruneSchedule {
  /** Cancels the next run, cuts one in progress short and waits for it, so the database can be closed after. */
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
  const stopping = new AbortController();

  const run = async (): Promise<void> => {
    try {
      const result = await options.prune(stopping.signal);
      options.logger.info({ ...result, cutoff: new Date(result.cutoff).toISOString() }, describePrune(result));
    } catch (error) {
      options.logger.error({ err: error }, 'retention prune failed; next attempt at the next run');
    }
  };
  const plan = (ms: number) => {
    handle = timers.setTimeout(() => {
      running = run().finally(() => {
        running = undefined;
        if (!stopping.signal.aborted) plan(intervalMs);
      });
      return running;
    }, ms);
  };
  plan(options.firstDelayMs ?? 30_000);

  return {
    async stop() {
      stopping.abort();
      timers.clearTimeout(handle);
      await running;
    },
  };
}
