import type { Clock } from '../clock.js';
import type { Logger } from '../log.js';
import type { Timers } from '../schedule.js';
import type { Leases } from '../store/state/leases.js';
import { LeaseLostError } from './errors.js';

export interface KeptLease {
  /**
   * Resolves when the lease is surely held for at least half its time more (renewing it first when
   * the timer has not lately); throws LeaseLostError once it is lost. Called before each write.
   */
  confirm(): Promise<void>;
  /** Stops renewing (the run ended); the caller releases the lease. */
  stop(): void;
}

/**
 * Renews a lease just taken on a timer while the run works, so a slow or retried upstream request,
 * or a Retry-After wait, never outlives it. When a renewal finds it lost (expired or taken), or
 * renewals fail until it may have expired, `onLost` is called once: the run aborts and stops before
 * its next write.
 */
export function keepLease(options: {
  leases: Leases;
  holder: string;
  ttlMs: number;
  clock: Clock;
  timers: Timers;
  logger: Logger;
  onLost(error: LeaseLostError): void;
}): KeptLease {
  const { leases, holder, ttlMs, clock, timers, logger } = options;
  // Elapsed time on this replica's clock measures how long a renewal keeps: its rate, not its offset, matters.
  let renewedAt = clock.now();
  let lost: LeaseLostError | undefined;
  let stopped = false;
  let handle: unknown;
  let renewing: Promise<void> | undefined;

  const lose = () => {
    if (lost) return;
    lost = new LeaseLostError();
    options.onLost(lost);
  };

  const renew = (): Promise<void> =>
    (renewing ??= (async () => {
      const sentAt = clock.now();
      try {
        if (await leases.renew(holder, ttlMs)) renewedAt = sentAt;
        else lose();
      } catch (error) {
        // The database may answer again in time; past the lease's length it may have been taken.
        logger.warn({ err: error }, 'cannot renew the reconciliation lease; trying again');
        if (clock.now() - renewedAt >= ttlMs) lose();
      } finally {
        renewing = undefined;
      }
    })());

  const plan = () => {
    handle = timers.setTimeout(async () => {
      await renew();
      if (!stopped && !lost) plan();
    }, ttlMs / 3);
  };
  plan();

  return {
    async confirm() {
      if (!lost && clock.now() - renewedAt >= ttlMs / 2) await renew();
      if (!lost && clock.now() - renewedAt >= ttlMs / 2) lose();
      if (lost) throw lost;
    },
    stop() {
      stopped = true;
      timers.clearTimeout(handle);
    },
  };
}
