import type { Kysely } from 'kysely';
import type { EventRow } from './outbox.js';
import type { Schema } from './schema.js';

/** The outbox rows of one event (one per sink it was routed to, and one per replay), oldest first: what the admin API shows per sink. */
export async function rowsOfEvent(db: Kysely<Schema>, eventId: string): Promise<EventRow[]> {
  const rows = await db
    .selectFrom('outbox')
    .select(['sink', 'status', 'attempts', 'last_error', 'updated_at'])
    .where('delivery_id', '=', eventId)
    .orderBy('id')
    .execute();
  return rows.map((r) => ({ sink: r.sink, status: r.status, attempts: r.attempts, lastError: r.last_error, updatedAt: r.updated_at }));
}
