import { sql, type Kysely } from 'kysely';
import type { Replay } from './outbox.js';
import type { Schema } from './schema.js';

/**
 * New pending rows for the stored deliveries received since `since`, for every sink whose event
 * filter takes the event's type (or just `sink`). They keep the event id, so receivers (and
 * JetStream's duplicate window) can tell a replay from a new event. One statement per sink.
 */
export async function queueReplay(db: Kysely<Schema>, { since, now, sinksFor, sink }: Replay): Promise<number> {
  // A walk over the few distinct types of the (type, received_at) index, each checked for a delivery
  // since then: a few index seeks, where DISTINCT reads every entry of the window (or the whole index).
  const { rows: types } = await sql<{ type: string }>`
    WITH RECURSIVE t(type) AS (
      SELECT min(type) FROM deliveries
      UNION ALL SELECT (SELECT min(type) FROM deliveries WHERE type > t.type) FROM t WHERE t.type IS NOT NULL
    )
    SELECT type FROM t
    WHERE type IS NOT NULL AND EXISTS (SELECT 1 FROM deliveries AS d WHERE d.type = t.type AND d.received_at >= ${since})`.execute(db);
  const typesBySink = new Map<string, string[]>();
  for (const { type } of types) {
    for (const target of sinksFor(type)) {
      if (sink === undefined || target === sink) typesBySink.set(target, [...(typesBySink.get(target) ?? []), type]);
    }
  }
  let queued = 0;
  for (const [target, sinkTypes] of typesBySink) {
    const result = await db
      .insertInto('outbox')
      .columns(['delivery_id', 'sink', 'status', 'attempts', 'next_attempt_at', 'created_at', 'updated_at', 'box_id'])
      .expression(
        db
          .selectFrom('deliveries')
          .select([
            'id',
            sql.val(target).as('sink'),
            sql.val('pending').as('status'),
            sql.val(0).as('attempts'),
            sql.val(now).as('next_attempt_at'),
            sql.val(now).as('created_at'),
            sql.val(now).as('updated_at'),
            'box_id',
          ])
          .where('received_at', '>=', since)
          .where('type', 'in', sinkTypes)
          .orderBy('received_at')
          .orderBy('id'),
      )
      .executeTakeFirst();
    queued += Number(result.numInsertedOrUpdatedRows ?? 0);
  }
  return queued;
}
