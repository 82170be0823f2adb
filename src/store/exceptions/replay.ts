import { setImmediate as nextTurn } from 'node:timers/promises';
import { sql, type CompiledQuery } from 'kysely';
import { atomically } from '../engines/atomically.js';
import { insertAudit, type AuditNote } from '../state/audit.js';
import type { Database } from '../engines/database.js';
import { insertPending, type Replay } from './rows.js';

/**
 * Stored deliveries queued per page, each page its own short transaction: on SQLite a transaction
 * holds the receive thread, on PostgreSQL a long one holds the log's read fence.
 */
export const REPLAY_PAGE = 1000;

/**
 * A pending row, written as an expression so that SQLite's planner seeks the event's own rows
 * (`outbox_delivery`), not every pending row of the sink (the partial indexes on `status = 'pending'`).
 */
const PENDING = sql<boolean>`o.status || '' = 'pending'`;

interface PageRow {
  id: string;
  type: string;
  origin: string | null;
  sinks: string | null;
  received_at: number;
  /** Read only where routing needs it: no stored routing (before migration 012), an operator event, or a replay for one sink. */
  payload: string | null;
}

/**
 * New pending rows for the deliveries received from `since` up to `now` (the request), each for the
 * sinks it was routed to when accepted (the `sinks` column; before migration 012, the router's),
 * still configured, less the sink an operator event is about. A (delivery, sink) that already has a
 * pending row gets none. They keep the event id, so receivers (and JetStream's duplicate window)
 * can tell a replay from a new event. Queued in pages of `pageSize` deliveries in accepted order,
 * each page its own transaction with a turn of the event loop after it; the audit row commits with
 * the first page, so a replay cut short by a crash is recorded, and what it queued stays queued: run
 * again, it queues only what is not pending.
 */
export async function queueReplay(database: Database, replay: Replay, audit?: AuditNote, pageSize = REPLAY_PAGE): Promise<number> {
  const db = database.kysely;
  const { since, now } = replay;
  let queued = 0;
  let unrecorded = audit;
  let after: { receivedAt: number; id: string } | undefined;
  for (;;) {
    const page: PageRow[] = await db
      .selectFrom('deliveries')
      .select([
        'id',
        'type',
        'origin',
        'sinks',
        'received_at',
        replay.sink === undefined ? sql<string | null>`CASE WHEN sinks IS NULL OR origin = 'operator' THEN payload END`.as('payload') : sql<string>`payload`.as('payload'),
      ])
      .where('received_at', '>=', after?.receivedAt ?? since)
      .where('received_at', '<=', now)
      .$if(after !== undefined, (q) => q.where((eb) => eb.or([eb('received_at', '>', after!.receivedAt), eb('id', '>', after!.id)])))
      .orderBy('received_at')
      .orderBy('id')
      .limit(pageSize)
      .execute();
    const inserts = pageInserts(database, replay, page);
    const note = unrecorded;
    if (inserts.length > 0 || note) {
      queued += await atomically(database, function* () {
        let changed = 0;
        for (const statement of inserts) changed += (yield statement).changed;
        if (note) yield insertAudit(db, note);
        return changed;
      });
    }
    unrecorded = undefined;
    const last = page[page.length - 1];
    if (page.length < pageSize || last === undefined) return queued;
    after = { receivedAt: last.received_at, id: last.id };
    await nextTurn();
  }
}

/**
 * The sinks a replay sends a stored delivery to: those it was routed to. A replay for one named
 * sink also takes what that sink's routing takes now (an operator backfilling a hook added later).
 */
function replayTargets({ sinksFor, configured, sink }: Replay, row: PageRow): string[] {
  const stored = row.sinks === null ? [] : row.sinks.split(',').filter((name) => name !== '');
  const routed = row.sinks === null || sink !== undefined ? [...stored, ...sinksFor(row.type, { payload: row.payload ?? '', origin: row.origin })] : stored;
  const about = row.origin === 'operator' && row.payload !== null ? aboutSink(row.payload) : undefined;
  return [...new Set(routed)].filter((target) => configured.includes(target) && (sink === undefined || target === sink) && target !== about);
}

/** The sink an operator event names in `data.sink` (a pause, a resume, a dead letter): a sink is never told about itself. */
export function aboutSink(payload: string): string | undefined {
  const { data } = JSON.parse(payload) as { data?: { sink?: unknown } };
  return typeof data?.sink === 'string' ? data.sink : undefined;
}

/** One INSERT per target sink of the page, its rows in accepted order (per-box order follows row ids). */
function pageInserts(database: Database, replay: Replay, page: PageRow[]): CompiledQuery[] {
  const idsBySink = new Map<string, string[]>();
  for (const row of page) {
    for (const target of replayTargets(replay, row)) {
      const ids = idsBySink.get(target);
      if (ids) ids.push(row.id);
      else idsBySink.set(target, [row.id]);
    }
  }
  const db = database.kysely;
  const { now } = replay;
  return [...idsBySink].map(([target, ids]) =>
    insertPending(db, target, now, (deliveries) =>
      deliveries
        .where('d.id', 'in', ids)
        .where(({ not, exists, selectFrom }) =>
          not(
            exists(
              selectFrom('outbox as o')
                .select('o.id')
                .whereRef('o.delivery_id', '=', 'd.id')
                .where('o.sink', '=', target)
                .where(PENDING)
                // PostgreSQL: kept a probe per event; as an anti-join, its planner (with the outbox's statistics
                // behind a replay's growth) chose a scan of the sink's whole outbox per page.
                .$if(database.dialect === 'postgres', (q) => q.offset(0)),
            ),
          ),
        )
        .orderBy('d.received_at')
        .orderBy('d.id'),
    )
      // A replay that runs beside another (or a log lane writing an exception) keeps one open row per event and sink.
      .onConflict((oc) => oc.doNothing())
      .compile(),
  );
}
