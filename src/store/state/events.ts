import { sql, type Kysely } from 'kysely';
import { ofAccount } from '../account-keys.js';
import type { Schema } from '../schema.js';

/** The position of an event in the listing order: receipt time, then id for events of the same ms. */
export interface EventPosition {
  receivedAt: number;
  id: string;
}

export interface EventQuery {
  type?: string | undefined;
  /** Only the events of these boxes (stored keys: one box id in one or several accounts). */
  boxKeys?: string[] | undefined;
  /** Only this account's events. */
  account?: string | undefined;
  /** The database sorts text bytewise (`sortsTextBytewise`): an account's keys are one range. */
  bytewise?: boolean;
  /** Epoch ms: only events received at or after it. */
  since?: number | undefined;
  /** Return events strictly older than this position (keyset pagination). */
  before?: EventPosition | undefined;
  limit: number;
}

export interface StoredEvent extends EventPosition {
  payload: string;
  origin: string | null;
}

/**
 * Stored events, newest first by (received_at, id). Keyset pagination: a page continues strictly
 * below the last position returned, so rows arriving meanwhile (newer) never shift or repeat a page.
 */
export async function listEvents(kysely: Kysely<Schema>, query: EventQuery): Promise<StoredEvent[]> {
  let select = kysely.selectFrom('deliveries').select(['id', 'received_at', 'payload', 'origin']);
  if (query.type !== undefined) {
    // With a box too, the box's index is the narrow one; SQLite keeps no statistics and would take
    // the type index for a bare `type = ?`, so the comparison is written so that no index serves it.
    const type = query.boxKeys === undefined ? sql.ref('type') : sql`${sql.ref('type')} || ''`;
    select = select.where(type, '=', query.type);
  }
  if (query.boxKeys !== undefined) select = select.where('box_id', 'in', query.boxKeys);
  if (query.account !== undefined) select = select.where(ofAccount('id', query.account, query.bytewise ?? false));
  if (query.since !== undefined) select = select.where('received_at', '>=', query.since);
  const before = query.before;
  if (before !== undefined) {
    // The first bound, implied by the second, is the one an index on (…, received_at) can seek to.
    select = select.where('received_at', '<=', before.receivedAt).where((eb) =>
      eb.or([
        eb('received_at', '<', before.receivedAt),
        eb.and([eb('received_at', '=', before.receivedAt), eb('id', '<', before.id)]),
      ]),
    );
  }
  const rows = await select.orderBy('received_at', 'desc').orderBy('id', 'desc').limit(query.limit).execute();
  return rows.map((r) => ({ id: r.id, receivedAt: r.received_at, payload: r.payload, origin: r.origin }));
}

/** Which of these event ids are stored. */
export async function heldEventIds(kysely: Kysely<Schema>, ids: string[]): Promise<Set<string>> {
  if (ids.length === 0) return new Set();
  const rows = await kysely.selectFrom('deliveries').select('id').where('id', 'in', ids).execute();
  return new Set(rows.map((r) => r.id));
}

/** One stored event by id, with its type (which decides where it fans out). */
export async function getEvent(kysely: Kysely<Schema>, id: string): Promise<(StoredEvent & { type: string }) | undefined> {
  const row = await kysely.selectFrom('deliveries').select(['id', 'type', 'received_at', 'payload', 'origin']).where('id', '=', id).executeTakeFirst();
  return row && { id: row.id, type: row.type, receivedAt: row.received_at, payload: row.payload, origin: row.origin };
}
