import type { Kysely } from 'kysely';
import type { Schema } from './schema.js';

export interface LeaseClaim {
  name: string;
  holder: string;
  now: number;
  ttlMs: number;
}

/**
 * Takes the named lease when it is free or expired (a holder that died frees it by expiry), or
 * extends it when `holder` already has it. True when `holder` holds it afterwards. One statement,
 * so two replicas racing for it cannot both win, on SQLite and PostgreSQL alike.
 */
export async function claimLease(kysely: Kysely<Schema>, { name, holder, now, ttlMs }: LeaseClaim): Promise<boolean> {
  const row = await kysely
    .insertInto('leases')
    .values({ name, holder, expires_at: now + ttlMs })
    .onConflict((oc) =>
      oc
        .column('name')
        .doUpdateSet({ holder, expires_at: now + ttlMs })
        .where((eb) => eb.or([eb('leases.expires_at', '<=', now), eb('leases.holder', '=', holder)])),
    )
    .returning('holder')
    .executeTakeFirst();
  return row !== undefined;
}

export async function releaseLease(kysely: Kysely<Schema>, name: string, holder: string): Promise<void> {
  await kysely.deleteFrom('leases').where('name', '=', name).where('holder', '=', holder).execute();
}

/** Whether anyone holds the lease now. */
export async function leaseHeld(kysely: Kysely<Schema>, name: string, now: number): Promise<boolean> {
  const row = await kysely.selectFrom('leases').select('holder').where('name', '=', name).where('expires_at', '>', now).executeTakeFirst();
  return row !== undefined;
}
