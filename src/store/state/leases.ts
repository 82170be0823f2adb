import { sql, type Kysely } from 'kysely';
import type { LeaseNow } from '../engines/database-clock.js';
import type { Schema } from '../schema.js';

/**
 * Named leases that keep a job to one process at a time across replicas. Every comparison and every
 * expiry is computed inside the statement from `now` (see leaseClock): on PostgreSQL the database's
 * clock, so replicas whose own clocks disagree by minutes still agree on who holds a lease.
 */
export interface Leases {
  /**
   * Takes the lease when it is free or expired (a holder that died frees it by expiry). True when
   * `holder` holds it afterwards. One statement, so two replicas racing for it cannot both win.
   */
  claim(holder: string, ttlMs: number): Promise<boolean>;
  /**
   * Extends the lease `holder` still holds unexpired; false when it expired or another holder has it,
   * since then another run may already have started: the holder lost it and must stop.
   */
  renew(holder: string, ttlMs: number): Promise<boolean>;
  release(holder: string): Promise<void>;
  /** Whether anyone holds it now. */
  held(): Promise<boolean>;
}

export function leaseOf(kysely: Kysely<Schema>, name: string, now: LeaseNow, clock: { now(): number }): Leases {
  const at = () => now(clock.now());
  return {
    async claim(holder, ttlMs) {
      const current = at();
      const expiresAt = sql<number>`${current} + ${ttlMs}`;
      const row = await kysely
        .insertInto('leases')
        .values({ name, holder, expires_at: expiresAt })
        .onConflict((oc) =>
          oc
            .column('name')
            .doUpdateSet({ holder, expires_at: expiresAt })
            .where((eb) => eb.or([eb('leases.expires_at', '<=', current), eb('leases.holder', '=', holder)])),
        )
        .returning('holder')
        .executeTakeFirst();
      return row !== undefined;
    },
    async renew(holder, ttlMs) {
      const current = at();
      const row = await kysely
        .updateTable('leases')
        .set({ expires_at: sql<number>`${current} + ${ttlMs}` })
        .where('name', '=', name)
        .where('holder', '=', holder)
        .where('expires_at', '>', current)
        .returning('holder')
        .executeTakeFirst();
      return row !== undefined;
    },
    async release(holder) {
      await kysely.deleteFrom('leases').where('name', '=', name).where('holder', '=', holder).execute();
    },
    async held() {
      const row = await kysely.selectFrom('leases').select('holder').where('name', '=', name).where('expires_at', '>', at()).executeTakeFirst();
      return row !== undefined;
    },
  };
}
