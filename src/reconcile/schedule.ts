import type { Logger } from '../log.js';
import { scheduleRepeating, type Schedule, type Timers } from '../schedule.js';
import type { Reconciler } from './reconciler.js';

/** Within 30 s of start-up (contract section 9), not during it. */
export const FIRST_RUN_DELAY_MS = 10_000;

/**
 * Runs each account's reconciliation every interval, on a schedule of its own, so one account's long
 * run never delays another's; across replicas each account's lease and last run's time keep it to one.
 */
export function scheduleReconcile(
  reconcilers: ReadonlyMap<string, Reconciler>,
  options: { intervalMs: number; logger: Logger; timers?: Timers | undefined; firstDelayMs?: number | undefined },
): Schedule {
  const schedules = [...reconcilers].map(([account, reconciler]) =>
    scheduleRepeating(
      async () => {
        await reconciler.runIfDue(options.intervalMs);
      },
      {
        timers: options.timers,
        firstDelayMs: options.firstDelayMs ?? FIRST_RUN_DELAY_MS,
        intervalMs: options.intervalMs,
        onError: (error) => options.logger.error({ err: error, account }, 'cannot start a reconciliation run; next attempt at the next interval'),
      },
    ),
  );
  return {
    async stop() {
      await Promise.all(schedules.map((schedule) => schedule.stop()));
    },
  };
}
