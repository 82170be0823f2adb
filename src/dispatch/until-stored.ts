import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from '../log.js';

/** What a write tried until it holds gives when the dispatcher stops first. */
export const STOPPED = Symbol('stopped');

export type UntilStored = <T>(what: string, write: () => Promise<T>, context: Record<string, unknown>) => Promise<T | typeof STOPPED>;

/**
 * Tries a write that settles an event again until it holds (backing off up to `maxDelayMs`), or
 * gives STOPPED once `stopping` aborts: an entry left unsettled while its lane goes on would hold its
 * partition's cursor back (and its box's later events) until the process restarts. The first try is
 * made even while stopping: an attempt that ended is written down.
 */
export function untilStoredBy({ stopping, maxDelayMs, log }: { stopping: AbortSignal; maxDelayMs: number; log: Logger }): UntilStored {
  return async (what, write, context) => {
    for (let delayMs = 100; ; delayMs = Math.min(2 * delayMs, maxDelayMs)) {
      try {
        return await write();
      } catch (error) {
        log.error({ err: error, ...context }, `could not ${what}; trying again`);
      }
      try {
        await sleep(delayMs, undefined, { signal: stopping });
      } catch {
        return STOPPED;
      }
    }
  };
}
