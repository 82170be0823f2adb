import type { Kysely, Selectable } from 'kysely';
import type { BoxesTable, Schema } from './schema.js';

/** A box as the admin API shows it (contract section 6). */
export interface Box {
  id: string;
  name: string | null;
  state: string | null;
  previousState: string | null;
  stateChangedAt: string | null;
  lastEventId: string | null;
  hydratedAt: string | null;
}

const toBox = (row: Omit<Selectable<BoxesTable>, 'last_seen_at'>): Box => ({
  id: row.id,
  name: row.name,
  state: row.state,
  previousState: row.previous_state,
  stateChangedAt: row.state_changed_at,
  lastEventId: row.last_event_id,
  hydratedAt: row.hydrated_at,
});

const BOX_COLUMNS = ['id', 'name', 'state', 'previous_state', 'state_changed_at', 'last_event_id', 'hydrated_at'] as const;

export interface BoxQuery {
  state?: string | undefined;
  /** Return boxes whose id sorts after this one (keyset pagination by id). */
  afterId?: string | undefined;
  limit: number;
}

/** Boxes in id order; keyset pagination, so boxes added or forgotten meanwhile never shift a page. */
export async function listBoxes(kysely: Kysely<Schema>, query: BoxQuery): Promise<Box[]> {
  let select = kysely.selectFrom('boxes').select(BOX_COLUMNS);
  if (query.state !== undefined) select = select.where('state', '=', query.state);
  if (query.afterId !== undefined) select = select.where('id', '>', query.afterId);
  const rows = await select.orderBy('id').limit(query.limit).execute();
  return rows.map(toBox);
}

export async function getBox(kysely: Kysely<Schema>, id: string): Promise<Box | undefined> {
  const row = await kysely.selectFrom('boxes').select(BOX_COLUMNS).where('id', '=', id).executeTakeFirst();
  return row && toBox(row);
}

/** Forgets a box; true when it was known. A later event about it starts a fresh record. */
export async function forgetBox(kysely: Kysely<Schema>, id: string): Promise<boolean> {
  const result = await kysely.deleteFrom('boxes').where('id', '=', id).executeTakeFirst();
  return result.numDeletedRows > 0n;
}

/** Box counts by stored state (null: no state known yet, e.g. only `box.hydrated` seen). */
export async function countBoxesByState(kysely: Kysely<Schema>): Promise<{ state: string | null; count: number }[]> {
  // count() is a BIGINT on PostgreSQL, which database.ts reads as a number like SQLite's.
  return kysely
    .selectFrom('boxes')
    .select((eb) => ['state', eb.fn.countAll<number>().as('count')])
    .groupBy('state')
    .execute();
}
