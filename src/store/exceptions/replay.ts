import { sql, type CompiledQuery, type Expression, type ExpressionBuilder, type SqlBool } from 'kysely';
import { atomically } from '../engines/atomically.js';
import { insertAudit, type AuditNote } from '../state/audit.js';
import type { Database } from '../engines/database.js';
import type { Replay } from './rows.js';
import type { Schema } from '../schema.js';

/** Stored events read at a time for the hooks with a filter (evaluated here per event), and ids queued per statement. */
const FILTER_PAGE = 500;

type Narrow = (eb: ExpressionBuilder<Schema, 'deliveries'>) => Expression<SqlBool>;

/**
 * New pending rows for the stored deliveries received since `since`, for every sink whose event
 * patterns take the event's type and whose filter (a hook's, if it has one) is true for the event
 * (or just `sink`). They keep the event id, so receivers (and JetStream's duplicate window) can
 * tell a replay from a new event. One statement per sink, or per page of events for a filtered
 * hook (whose events are read and filtered first), all in one transaction with the operator's audit
 * row when one is given.
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

  const insert = (target: string, narrow: Narrow) =>
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
          .where(narrow)
          .orderBy('received_at')
          .orderBy('id'),
      )
      // An event already waiting for the sink is sent once: one open row per event and sink.
      .onConflict((oc) => oc.doNothing())
      .compile();

  /** A filtered hook: its events read page by page (in accepted order), each put to the router with its body. */
  const filteredInserts = async (target: string, sinkTypes: string[]) => {
    const pages: CompiledQuery[] = [];
    let after: { receivedAt: number; id: string } | undefined;
    for (;;) {
      const page = await db
        .selectFrom('deliveries')
        .select(['id', 'type', 'payload', 'origin', 'received_at'])
        .where('received_at', '>=', since)
        .where('type', 'in', sinkTypes)
        .$if(after !== undefined, (q) =>
          q.where((eb) => eb.or([eb('received_at', '>', after!.receivedAt), eb.and([eb('received_at', '=', after!.receivedAt), eb('id', '>', after!.id)])])),
        )
        .orderBy('received_at')
        .orderBy('id')
        .limit(FILTER_PAGE)
        .execute();
      const ids = page.filter((row) => sinksFor(row.type, row).includes(target)).map((row) => row.id);
      if (ids.length > 0) pages.push(insert(target, (eb) => eb('id', 'in', ids)));
      const last = page[page.length - 1];
      if (page.length < FILTER_PAGE || last === undefined) return pages;
      after = { receivedAt: last.received_at, id: last.id };
    }
  };

  const inserts: CompiledQuery[] = [];
  for (const [target, sinkTypes] of typesBySink) {
    if (sinksFor.filtered?.has(target)) inserts.push(...(await filteredInserts(target, sinkTypes)));
    else inserts.push(insert(target, (eb) => eb('type', 'in', sinkTypes)));
  }
  return atomically(database, function* () {
    let queued = 0;
    for (const statement of inserts) queued += (yield statement).changed;
    if (audit) yield insertAudit(db, audit);
    return queued;
  });
}
