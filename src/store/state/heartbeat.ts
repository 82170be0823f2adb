import type { Kysely } from 'kysely';
import type { Schema } from '../schema.js';

/** The readiness probe's tiny durable write: one row, overwritten. */
export function beatQuery(db: Kysely<Schema>, now: number) {
  return db
    .insertInto('heartbeat')
    .values({ id: 1, beat_at: now })
    .onConflict((c) => c.column('id').doUpdateSet({ beat_at: now }));
}
