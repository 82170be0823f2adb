import type { Database } from '../engines/database.js';
import { comparePositions } from '../log/position.js';
import type { EventRow } from './rows.js';

/**
 * Where one event stands with each sink it was routed to, oldest first (the newest of a sink counts):
 * first what the log says for each sink it was routed to when accepted (delivered once the sink's
 * cursor passed it, else pending), then its outbox rows (its exceptions and replays), which say more.
 */
export async function rowsOfEvent(database: Database, eventId: string): Promise<EventRow[]> {
  const db = database.kysely;
  const rows = await db
    .selectFrom('outbox')
    .select(['sink', 'status', 'attempts', 'last_error', 'updated_at'])
    .where('delivery_id', '=', eventId)
    .orderBy('id')
    .execute();
  const kept = rows.map((r): EventRow => ({ sink: r.sink, status: r.status, attempts: r.attempts, lastError: r.last_error, updatedAt: r.updated_at }));
  const logged = await db
    .selectFrom('deliveries')
    .select(['seq', 'part', 'sinks', 'received_at'])
    .where('id', '=', eventId)
    .executeTakeFirst();
  if (!logged || !logged.sinks) return kept;
  const sinks = logged.sinks.split(',');
  const pending = (sink: string): EventRow => ({ sink, status: 'pending', attempts: 0, lastError: null, updatedAt: logged.received_at });
  // Not numbered yet (PostgreSQL, for moments): no cursor can have passed it.
  if (logged.seq === null) return [...sinks.map(pending), ...kept];
  const position = { seq: Number(logged.seq) };
  const cursors = await db
    .selectFrom('log_cursors')
    .select(['sink', 'seq', 'updated_at'])
    .where('part', '=', logged.part)
    .where('sink', 'in', sinks)
    .execute();
  const fromLog = await Promise.all(
    sinks.map(async (sink): Promise<EventRow> => {
      const cursor = cursors.find((c) => c.sink === sink);
      if (!cursor || comparePositions(position, { seq: Number(cursor.seq) }) > 0) return pending(sink);
      const mark = await db
        .selectFrom('log_marks')
        .select('at')
        .where('sink', '=', sink)
        .where('part', '=', logged.part)
        .where('seq', '>=', position.seq)
        .orderBy('seq')
        .limit(1)
        .executeTakeFirst();
      return { sink, status: 'delivered', attempts: 1, lastError: null, updatedAt: Number(mark?.at ?? cursor.updated_at) };
    }),
  );
  return [...fromLog, ...kept];
}
