import { setTimeout as rest } from 'node:timers/promises';
import { sql, type CompiledQuery } from 'kysely';
import { runStatementTransaction } from '../engines/transactions.js';
import { once } from '../engines/sqlite-writes.js';
import { insertAudit, type AuditNote } from '../state/audit.js';
import type { Database } from '../engines/database.js';
import { noRowOf, sendAgain, type Replay } from './rows.js';
import { namedAccountOf } from '../account-keys.js';

/**
 * How much one step of a replay takes: at most `rows` stored deliveries, and the payloads it reads
 * to route them (a replay for one sink, operator events, deliveries stored before their routing
 * was) add up to at most `bytes` (past one delivery's own). Each step is its own short transaction
 * with a rest after it as long as the step took (so a replay takes at most half of the receive
 * thread): on SQLite a transaction holds the thread that writes (the storage thread, or inline the receive thread), on PostgreSQL a long one holds the
 * log's read fence, and routing runs filters on the receive thread.
 */
export interface ReplayStep {
  rows: number;
  bytes: number;
}

export const REPLAY_STEP: ReplayStep = { rows: 250, bytes: 1024 * 1024 };

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
  /** Bytes of the payload when routing it needs it (no stored routing, an operator event, or a replay for one sink), else 0. */
  size: number;
}

interface RoutedRow extends Omit<PageRow, 'size'> {
  /** Read only where routing needs it. */
  payload: string | null;
}

/**
 * New pending rows for the deliveries received from `since` up to `now` (the request), each for the
 * sinks it was routed to when accepted (the `sinks` column; before migration 012, the router's),
 * still configured, less the sink an operator event is about. A (delivery, sink) that already has a
 * pending row gets none; one with a dead letter (or set-aside work) has it sent again. They keep the
 * event id, so receivers (and JetStream's duplicate window) can tell a replay from a new event.
 * Queued in steps (`ReplayStep`) in accepted order; the audit row commits with the first step, so a
 * replay cut short by a crash is recorded, and what it queued stays queued: run again, it queues
 * only what is not pending.
 */
export async function queueReplay(database: Database, replay: Replay, audit?: AuditNote, step: ReplayStep = REPLAY_STEP): Promise<number> {
  const db = database.kysely;
  const { since, now } = replay;
  const routedByPayload = replay.sink === undefined ? sql<boolean>`(sinks IS NULL OR origin = 'operator')` : sql<boolean>`TRUE`;
  let queued = 0;
  let unrecorded = audit;
  let after: { receivedAt: number; id: string } | undefined;
  for (;;) {
    const started = performance.now();
    const page: PageRow[] = await db
      .selectFrom('deliveries')
      .select(['id', 'type', 'origin', 'sinks', 'received_at', sql<number>`CASE WHEN ${routedByPayload} THEN octet_length(payload) ELSE 0 END`.as('size')])
      .where('received_at', '>=', after?.receivedAt ?? since)
      .where('received_at', '<=', now)
      .$if(after !== undefined, (q) => q.where((eb) => eb.or([eb('received_at', '>', after!.receivedAt), eb('id', '>', after!.id)])))
      .orderBy('received_at')
      .orderBy('id')
      .limit(step.rows)
      .execute();
    const taken = withinBytes(page, step.bytes);
    const routed = await withPayloads(database, taken);
    const inserts = pageInserts(database, replay, routed);
    const note = unrecorded;
    if (inserts.length > 0 || note) {
      const results = await runStatementTransaction(database, [...inserts, ...(note ? [insertAudit(db, note)] : [])].map((query) => once(query)));
      queued += results.slice(0, inserts.length).reduce((sum, { changed }) => sum + changed, 0);
    }
    unrecorded = undefined;
    const last = taken[taken.length - 1];
    if ((taken.length === page.length && page.length < step.rows) || last === undefined) return queued;
    after = { receivedAt: last.received_at, id: last.id };
    await rest(performance.now() - started);
  }
}

/** The first rows of a page whose payloads to read add up to at most `bytes`; at least one row. */
function withinBytes(page: PageRow[], bytes: number): PageRow[] {
  let total = 0;
  const end = page.findIndex((row, i) => {
    total += Number(row.size);
    return i > 0 && total > bytes;
  });
  return end < 0 ? page : page.slice(0, end);
}

/** The rows with the payloads their routing needs, read in one statement. */
async function withPayloads(database: Database, rows: PageRow[]): Promise<RoutedRow[]> {
  const wanted = rows.filter((row) => Number(row.size) > 0).map((row) => row.id);
  const payloads = new Map<string, string>();
  if (wanted.length > 0) {
    const read = await database.kysely.selectFrom('deliveries').select(['id', 'payload']).where('id', 'in', wanted).execute();
    for (const { id, payload } of read) payloads.set(id, payload);
  }
  return rows.map(({ size: _size, ...row }) => ({ ...row, payload: payloads.get(row.id) ?? null }));
}

/**
 * The sinks a replay sends a stored delivery to: those it was routed to. A replay for one named
 * sink also takes what that sink's routing takes now (an operator backfilling a hook added later).
 */
function replayTargets({ sinksFor, configured, sink }: Replay, row: RoutedRow): string[] {
  const stored = row.sinks === null ? [] : row.sinks.split(',').filter((name) => name !== '');
  const routed = row.sinks === null || sink !== undefined ? [...stored, ...sinksFor(row.type, { payload: row.payload ?? '', origin: row.origin, account: namedAccountOf(row.id) })] : stored;
  const about = row.origin === 'operator' && row.payload !== null ? aboutSink(row.payload) : undefined;
  return [...new Set(routed)].filter((target) => configured.includes(target) && (sink === undefined || target === sink) && target !== about);
}

/** The sink an operator event names in `data.sink` (a pause, a resume, a dead letter): a sink is never told about itself. */
export function aboutSink(payload: string): string | undefined {
  const { data } = JSON.parse(payload) as { data?: { sink?: unknown } };
  return typeof data?.sink === 'string' ? data.sink : undefined;
}

/** One INSERT per target sink of the page, its rows in accepted order (per-box order follows row ids). */
function pageInserts(database: Database, replay: Replay, page: RoutedRow[]): CompiledQuery[] {
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
    sendAgain(
      db,
      target,
      now,
      (deliveries) =>
        deliveries
          .where('d.id', 'in', ids)
          .where(noRowOf(database, target, PENDING))
          .orderBy('d.received_at')
          .orderBy('d.id'),
      // A replay that runs beside another (or a log lane writing an exception) keeps one live row per event and sink.
      { pendingStands: true },
    ).compile(),
  );
}
