import { sql, type Kysely, type Selectable } from 'kysely';
import { writeAudited, type AuditNote } from './audit.js';
import type { Database } from '../engines/database.js';
import type { BoxesTable, Schema } from '../schema.js';
import { NAMED_ACCOUNT_KEY, ofAccount } from '../account-keys.js';

/** A stored box (contract section 6), keyed as the store keys it (`src/store/account-keys.ts`). */
export interface Box {
  id: string;
  name: string | null;
  state: string | null;
  previousState: string | null;
  stateChangedAt: string | null;
  lastEventId: string | null;
  hydratedAt: string | null;
}

const toBox = (row: Omit<Selectable<BoxesTable>, 'last_seen_at' | 'repaired_up_to'>): Box => ({
  id: row.id,
  name: row.name,
  state: row.state,
  previousState: row.previous_state,
  stateChangedAt: row.state_changed_at,
  lastEventId: row.last_event_id,
  hydratedAt: row.hydrated_at,
});

/** A box row's columns, as the delivery writers write them and the admin views read them (`repaired_up_to` is the reconciler's). */
export const BOX_COLUMNS = ['id', 'name', 'state', 'previous_state', 'state_changed_at', 'last_event_id', 'hydrated_at', 'last_seen_at'] as const;

export interface BoxQuery {
  state?: string | undefined;
  /** Only boxes whose id (the upstream's, without an account's prefix) or name contains this text, in any case. */
  search?: string | undefined;
  /** Only this account's boxes. */
  account?: string | undefined;
  /** The database sorts text bytewise (`sortsTextBytewise`): an account's keys are one range of the ids' index. */
  bytewise?: boolean;
  /** Return boxes whose id sorts after this one (keyset pagination by id). */
  afterId?: string | undefined;
  limit: number;
}

/** Boxes in id order; keyset pagination, so boxes added or forgotten meanwhile never shift a page. */
export async function listBoxes(kysely: Kysely<Schema>, query: BoxQuery): Promise<Box[]> {
  let select = kysely.selectFrom('boxes').select(BOX_COLUMNS);
  if (query.state !== undefined) select = select.where('state', '=', query.state);
  if (query.search !== undefined) {
    // LIKE with its wildcards escaped, on lower() of both sides: the same on SQLite and PostgreSQL.
    const pattern = `%${query.search.toLowerCase().replace(/[\\%_]/g, '\\$&')}%`;
    // In a named account's key (`<name>:<id>`) the text must come after the `:`, in the box's own id.
    const inId = sql<boolean>`(lower(id) like ${pattern} escape '\\' and (id not like ${NAMED_ACCOUNT_KEY} or lower(id) like ${`%:${pattern}`} escape '\\'))`;
    select = select.where(sql<boolean>`(${inId} or lower(name) like ${pattern} escape '\\')`);
  }
  if (query.account !== undefined) select = select.where(ofAccount('id', query.account, query.bytewise ?? false));
  if (query.afterId !== undefined) select = select.where('id', '>', query.afterId);
  const rows = await select.orderBy('id').limit(query.limit).execute();
  return rows.map(toBox);
}

export async function getBox(kysely: Kysely<Schema>, id: string): Promise<Box | undefined> {
  const row = await kysely.selectFrom('boxes').select(BOX_COLUMNS).where('id', '=', id).executeTakeFirst();
  return row && toBox(row);
}

const forget = (kysely: Kysely<Schema>, id: string) => kysely.deleteFrom('boxes').where('id', '=', id);

/** Forgets a box; true when it was known. A later event about it starts a fresh record. */
export async function forgetBox(kysely: Kysely<Schema>, id: string): Promise<boolean> {
  const result = await forget(kysely, id).executeTakeFirst();
  return result.numDeletedRows > 0n;
}

/** An operator's forget, recorded in the same transaction; a box that was not known records nothing (refused). */
export async function forgetBoxAudited(database: Database, id: string, audit: AuditNote): Promise<boolean> {
  return (await writeAudited(database, forget(database.kysely, id), audit, { onlyIfChanged: true })) > 0;
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

/** What a reconciliation run compares with the upstream's box (contract section 9, step 2). */
export interface BoxRecord {
  state: string | null;
  /** createdAt of the newest event held for the box (state change or hydration). */
  newestEventAt: string | null;
  stateChangedAt: string | null;
  repairedUpTo: string | null;
}

export async function boxRecords(kysely: Kysely<Schema>, ids: string[]): Promise<Map<string, BoxRecord>> {
  if (ids.length === 0) return new Map();
  const rows = await kysely
    .selectFrom('boxes')
    .select(['id', 'state', 'state_changed_at', 'hydrated_at', 'repaired_up_to'])
    .where('id', 'in', ids)
    .execute();
  return new Map(
    rows.map((row) => [
      row.id,
      {
        state: row.state,
        newestEventAt: [row.state_changed_at, row.hydrated_at].filter((t) => t !== null).sort().at(-1) ?? null,
        stateChangedAt: row.state_changed_at,
        repairedUpTo: row.repaired_up_to,
      },
    ]),
  );
}

export interface ObservedState {
  id: string;
  name: string | null;
  state: string;
  /** Normalized ISO time the upstream reports for the state. */
  at: string;
  now: number;
}

/**
 * Records a box's state seen in the upstream's list, without an event (a change from before the
 * watch start, or one no event type stands for). Like an event, it never rolls a newer state back.
 * With `onlyIfMissing`, it only brings back a box whose row is gone while its events are stored.
 */
export async function recordObservedState(kysely: Kysely<Schema>, box: ObservedState, { onlyIfMissing = false } = {}): Promise<void> {
  await kysely
    .insertInto('boxes')
    .values({
      id: box.id,
      name: box.name,
      state: box.state,
      previous_state: null,
      state_changed_at: box.at,
      last_event_id: null,
      hydrated_at: null,
      last_seen_at: box.now,
    })
    .onConflict((oc) =>
      onlyIfMissing
        ? oc.column('id').doNothing()
        : oc
        .column('id')
        .doUpdateSet((eb) => ({
          previous_state: eb.ref('boxes.state'),
          state: eb.ref('excluded.state'),
          state_changed_at: eb.ref('excluded.state_changed_at'),
          name: eb.fn.coalesce('excluded.name', 'boxes.name'),
          last_seen_at: eb.ref('excluded.last_seen_at'),
        }))
        .where((eb) => eb.or([eb('boxes.state_changed_at', 'is', null), eb('boxes.state_changed_at', '<', eb.ref('excluded.state_changed_at'))])),
    )
    .execute();
}

/** The upstream `updatedAt` a run repaired the box up to: the box costs nothing more until it changes again. */
export async function markRepaired(kysely: Kysely<Schema>, id: string, updatedAt: string): Promise<void> {
  await kysely.updateTable('boxes').set({ repaired_up_to: updatedAt }).where('id', '=', id).execute();
}

/** Ids of the account's boxes whose state last changed (or, with none, that were last heard of) before `before`, in id order. */
export async function boxesUnchangedSince(
  kysely: Kysely<Schema>,
  before: { iso: string; ms: number },
  afterId: string | undefined,
  limit: number,
  account: string,
): Promise<string[]> {
  let select = kysely
    .selectFrom('boxes')
    .select('id')
    .where((eb) =>
      eb.or([
        eb('state_changed_at', '<', before.iso),
        eb.and([eb('state_changed_at', 'is', null), eb('last_seen_at', '<', before.ms)]),
      ]),
    )
    // A run reads one account's upstream: another account's boxes are never absent from it. Its
    // pattern, not a range: this pass reads every box after `afterId` anyway.
    .where(ofAccount('id', account, false));
  if (afterId !== undefined) select = select.where('id', '>', afterId);
  const rows = await select.orderBy('id').limit(limit).execute();
  return rows.map((r) => r.id);
}
