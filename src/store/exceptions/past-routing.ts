import { setImmediate as nextTurn } from 'node:timers/promises';
import { sql, type CompiledQuery } from 'kysely';
import { UNRECORDED_ROUTING } from '../../../migrations/020_unrecorded_routing.js';
import type { StoredEvent } from '../../events/types.js';
import { namedAccountOf } from '../account-keys.js';
import { runStatementTransaction } from '../engines/transactions.js';
import type { Database } from '../engines/database.js';
import { once } from '../engines/sqlite-writes.js';
import { aboutSink } from './replay.js';
import { noRowOf } from './rows.js';

/**
 * Deliveries per page, each page one short transaction (on SQLite it holds the receive thread); their
 * payloads are read for the hooks' filters, so a page holds at most this many bodies in memory.
 */
const PAST_ROUTING_PAGE = 250;

/** How far the rows are written: deliveries received before `before`, after `after` in (received_at, id) order. */
interface Progress {
  before: number;
  after?: { receivedAt: number; id: string };
}

interface PageRow {
  id: string;
  type: string;
  received_at: number;
  /** What the hooks' filters see, and the sink an operator event is about (never routed to it). */
  payload: string;
  origin: string | null;
}

export interface PastRoutingOptions {
  /** Deliveries per page (tests make it small). */
  pageSize?: number;
  /** Stops between pages (a shutdown); the next start goes on from there. */
  signal?: AbortSignal;
}

/**
 * Gives each delivery stored by a release that deleted delivered rows (migration 020 names them) a
 * delivered row for every sink it is routed to and that it has no row of, as those releases
 * reported it: so its status lists every sink it went to, and the rows it kept (pending, dead) still
 * say where it stands with the others. `sinksFor` is the router new events are routed by (types,
 * accounts, hook filters), so an event is listed with the sinks this configuration routes it to.
 * Its attempts (1) and time (when received) stand for what was not kept. Nothing is sent.
 *
 * Page by page: a page is read with the progress it starts from, and its rows are written in one
 * transaction with the progress it makes, only if the progress is still the one it was read from
 * (compare and set): replicas starting together each write a page once (the one that lost reads
 * again), and a start cut short goes on where it stopped. Returns how many rows it wrote.
 */
export async function recordPastRouting(
  database: Database,
  sinksFor: (type: string, event: StoredEvent) => string[],
  { pageSize = PAST_ROUTING_PAGE, signal }: PastRoutingOptions = {},
): Promise<number> {
  const db = database.kysely;
  let written = 0;
  for (;;) {
    if (signal?.aborted) return written;
    const marker = await db.selectFrom('relay_meta').select('value').where('name', '=', UNRECORDED_ROUTING).executeTakeFirst();
    if (marker === undefined) return written;
    const progress = JSON.parse(marker.value) as Progress;
    const { after } = progress;
    const page: PageRow[] = await db
      .selectFrom('deliveries')
      .select(['id', 'type', 'received_at', 'payload', 'origin'])
      .where('sinks', 'is', null)
      .where('received_at', '<', progress.before)
      .$if(after !== undefined, (q) =>
        q.where('received_at', '>=', after!.receivedAt).where((eb) => eb.or([eb('received_at', '>', after!.receivedAt), eb('id', '>', after!.id)])),
      )
      .orderBy('received_at')
      .orderBy('id')
      .limit(pageSize)
      .execute();
    const last = page[page.length - 1];
    // The progress moves on (or, the last page written, goes) only from the value this page was read at.
    const next: Progress = { before: progress.before, ...(last ? { after: { receivedAt: Number(last.received_at), id: last.id } } : {}) };
    const moveOn =
      page.length < pageSize
        ? db.deleteFrom('relay_meta').where('name', '=', UNRECORDED_ROUTING).where('value', '=', marker.value)
        : db.updateTable('relay_meta').set({ value: JSON.stringify(next) }).where('name', '=', UNRECORDED_ROUTING).where('value', '=', marker.value);
    const [moved, ...inserts] = await runStatementTransaction(database, [
      once(moveOn.compile()),
      ...deliveredInserts(database, page, sinksFor).map((insert) => once(insert, 0)),
    ]);
    if (moved!.changed > 0) written += inserts.reduce((sum, { changed }) => sum + changed, 0);
    await nextTurn();
  }
}

/** One INSERT per sink the page was routed to: a delivered row for each of its deliveries without a row of that sink. */
function deliveredInserts(database: Database, page: PageRow[], sinksFor: (type: string, event: StoredEvent) => string[]): CompiledQuery[] {
  const idsBySink = new Map<string, string[]>();
  for (const row of page) {
    const about = row.origin === 'operator' ? aboutSink(row.payload) : undefined;
    for (const sink of sinksFor(row.type, { payload: row.payload, origin: row.origin, account: namedAccountOf(row.id) })) {
      if (sink === about) continue;
      const ids = idsBySink.get(sink);
      if (ids) ids.push(row.id);
      else idsBySink.set(sink, [row.id]);
    }
  }
  const db = database.kysely;
  return [...idsBySink].map(([sink, ids]) =>
    db
      .insertInto('outbox')
      .columns(['delivery_id', 'sink', 'status', 'attempts', 'next_attempt_at', 'created_at', 'updated_at', 'box_id'])
      .expression(
        db
          .selectFrom('deliveries as d')
          .select(['d.id', sql.val(sink).as('sink'), sql.val('delivered').as('status'), sql.val(1).as('attempts'), 'd.received_at', 'd.received_at', 'd.received_at', 'd.box_id'])
          .where('d.id', 'in', ids)
          .where(noRowOf(database, sink)),
      )
      .compile(),
  );
}
