import { sql } from 'kysely';
import { atomically } from './atomically.js';
import { insertAudit, type AuditNote } from './audit.js';
import type { Database } from './database.js';
import type { Replay } from './outbox.js';

/**
 * New pending rows for the stored deliveries received since `since`, for every sink whose event
 * filter takes the event's type (or just `sink`). They keep the event id, so receivers (and
 * JetStream's duplicate window) can tell a replay from a new event. One statement per sink, all in
 * one transaction with the operator's audit row when one is given.
 */
export async function queueReplay(database: Database, { since, now, sinksFor, sink }: Replay, audit?: AuditNote): Promise<number> {
  const db = database.kysely;
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
  const inserts = [...typesBySink].map(([target, sinkTypes]) =>
    db
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
      ),
  );
  return atomically(database, function* () {
    let queued = 0;
    for (const insert of inserts) queued += (yield insert.compile()).changed;
    if (audit) yield insertAudit(db, audit);
    return queued;
  });
}
