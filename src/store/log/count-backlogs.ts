import { setImmediate as nextTurn } from 'node:timers/promises';
import { sql, type Kysely, type RawBuilder } from 'kysely';
import type { Schema } from '../schema.js';
import type { Database } from '../engines/database.js';
import { routedSql, routedWithoutRow, unnumbered } from './position.js';

/**
 * Log entries one counting statement reads at most: on SQLite a statement holds the receive thread,
 * so a large backlog is counted in slices with a turn of the event loop between them.
 */
export const BACKLOG_COUNT_SLICE = 5000;

export type Backlogs = { sink: string; backlog: number }[];

/** Counts the backlogs; callers at the same moment share one count. */
export type CountBacklogs = () => Promise<Backlogs>;

/** What a sink's kept count stands on. */
interface Counted {
  /** Its cursor per partition. */
  cursors: Map<number, number>;
  /** The last position counted. */
  head: number;
  /** The outbox row id counted against: every row up to it that ever commits had committed by then. */
  rows: number;
  /** Numbered deliveries routed to the sink past `cursors` up to `head`, without a row of it up to `rows`. */
  backlog: number;
  /** The deletion count (`log_deletions`, kept by triggers) it was counted at. */
  deletions: string;
}

/**
 * Per sink, the routed deliveries past its cursors or not yet numbered (PostgreSQL), less those already
 * written down as an outbox row (counted there, or settled) while the cursor's move is not yet stored.
 *
 * The numbered part is kept between calls and followed: a numbered entry never changes, new ones are
 * numbered past the head, and rows are followed by id up to the settled one (followSettledRows). A
 * call takes off the counted entries the cursors have passed and those that got a row up to the
 * settled id since, and adds the entries past the last head, reading only those; entries with a row
 * past the settled id are taken off its answer, not the kept count. No lock is taken: a count never
 * waits for a write, nor a write for it. A cursor moved back, a partition's cursor added or removed,
 * or any deletion of deliveries or rows (retention) counts the sink again from its least cursor, as
 * the first call does.
 */
export function createBacklogCount(database: Database, slice = BACKLOG_COUNT_SLICE): CountBacklogs {
  const kept = new Map<string, Counted>();
  const settledRows = followSettledRows(database);
  const count = async (): Promise<Backlogs> => {
    const db = database.kysely;
    // Read first: a deletion after it is seen by the next call.
    const marker = await db.selectFrom('relay_meta').select('value').where('name', '=', 'log_deletions').executeTakeFirst();
    const deletions = marker?.value ?? '';
    const rows = await settledRows();
    const cursors = new Map<string, Map<number, number>>();
    for (const row of await db.selectFrom('log_cursors').select(['sink', 'part', 'seq']).execute()) {
      const parts = cursors.get(row.sink) ?? new Map<number, number>();
      cursors.set(row.sink, parts.set(row.part, Number(row.seq)));
    }
    for (const sink of kept.keys()) if (!cursors.has(sink)) kept.delete(sink);
    const backlogs: Backlogs = [];
    for (const [sink, now] of cursors) {
      const last = kept.get(sink);
      const from: From = rows !== undefined && last && followable(last, now, deletions) ? last : { cursors: now, head: Math.min(...now.values()), rows, backlog: 0 };
      const { next, waiting, written } = await follow(database, sink, from, { cursors: now, rows }, slice);
      if (rows !== undefined) kept.set(sink, { ...next, rows, deletions });
      backlogs.push({ sink, backlog: next.backlog - written + waiting });
    }
    return backlogs;
  };
  let counting: Promise<Backlogs> | undefined;
  return () => (counting ??= count().finally(() => (counting = undefined)));
}

/**
 * The highest outbox row id up to which every row that ever commits has committed, followed from
 * call to call without waiting for, or blocking, any write; undefined until one is known.
 *
 * On SQLite rows commit one writer at a time in id order, so it is the highest id. On PostgreSQL a
 * row may commit after one with a higher id: a call notes the highest id its statement sees and the
 * transactions then writing the outbox (`pg_locks`, read after the statement's snapshot: a writer
 * takes its lock on the table before it draws an id, and keeps it until it ends). Every row up to
 * that id is committed (or never will be) once none of those transactions is still writing, which
 * a later call sees; with none at all, at once. A writer is a holder of ROW EXCLUSIVE (what an
 * INSERT takes): autovacuum, ANALYZE or an index built beside it hold other modes and draw no id,
 * and counting them froze the settled id for as long as they ran. Ids drawn from a sequence that
 * caches more than one per session may commit in any order, so then no id is ever settled (each
 * count reads all rows, as the first does).
 */
export function followSettledRows(database: Database): () => Promise<number | undefined> {
  const db = database.kysely;
  if (database.dialect !== 'postgres') {
    return async () => Number((await db.selectFrom('outbox').select((eb) => eb.fn.max('id').as('id')).executeTakeFirst())?.id ?? 0);
  }
  let settled: number | undefined;
  let noted: { id: number; writers: string[] } | undefined;
  let idsInOrder: Promise<boolean> | undefined;
  const cachedOne = async () => {
    const { rows } = await sql<{ cache: string | null }>`SELECT s.seqcache AS cache FROM pg_sequence s
      WHERE s.seqrelid = pg_get_serial_sequence('outbox', 'id')::regclass`.execute(db);
    return Number(rows[0]?.cache ?? 1) <= 1;
  };
  return async () => {
    if (!(await (idsInOrder ??= cachedOne()))) return undefined;
    const { rows } = await sql<{ id: string | null; writers: string[] }>`SELECT (SELECT MAX(id) FROM outbox) AS id,
      ARRAY(SELECT l.virtualtransaction FROM pg_locks l
        WHERE l.locktype = 'relation' AND l.relation = 'outbox'::regclass
          AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
          AND l.mode = 'RowExclusiveLock' AND l.pid IS DISTINCT FROM pg_backend_pid()) AS writers`.execute(db);
    const id = Number(rows[0]?.id ?? 0);
    const writers = rows[0]?.writers ?? [];
    const settle = (upTo: number) => (settled = Math.max(settled ?? 0, upTo));
    if (noted && !noted.writers.some((writer) => writers.includes(writer))) settle(noted.id);
    // Those still writing are among the writers now: this note stands for the last one too.
    noted = { id, writers };
    if (writers.length === 0) settle(id);
    return settled;
  };
}

function followable(last: Counted, now: Map<number, number>, deletions: string): boolean {
  if (last.deletions !== deletions || last.cursors.size !== now.size) return false;
  for (const [part, seq] of now) if (!(seq >= (last.cursors.get(part) ?? Infinity))) return false;
  return true;
}

type From = Pick<Counted, 'cursors' | 'head' | 'backlog'> & { rows: number | undefined };

/**
 * One sink's count, from what was counted (`from`) to the cursors and rows of `now`; `waiting`: the
 * unnumbered (PostgreSQL), counted afresh; `written`: entries of `next` with a row past `now.rows`,
 * to take off this call's answer only. Without rows (`undefined`), every row counts.
 */
async function follow(database: Database, sink: string, from: From, now: { cursors: Map<number, number>; rows: number | undefined }, slice: number) {
  const db = database.kysely;
  let backlog = from.backlog;

  // Counted entries the cursors have moved past: (old cursor, new cursor] up to the old head, per partition.
  const passedTo = new Map([...now.cursors].map(([part, seq]) => [part, Math.max(from.cursors.get(part)!, Math.min(seq, from.head))]));
  const moved = [...passedTo].filter(([part, to]) => to > from.cursors.get(part)!);
  if (moved.length > 0) {
    const passed = sql<boolean>`d.seq > ${byPart(from.cursors)} AND d.seq <= ${byPart(passedTo)} AND ${routedWithoutRow(sink, from.rows)}`;
    const lowest = Math.min(...moved.map(([part]) => from.cursors.get(part)!));
    const highest = Math.max(...moved.map(([, to]) => to));
    for await (const [after, end] of slices(db, lowest, highest, slice)) backlog -= await countEntries(db, after, end ?? highest, passed);
  }

  const pastCursor = sql<boolean>`d.seq > ${byPart(now.cursors)}`;
  // Counted entries still past the cursors that got their first row since.
  if (from.rows !== undefined && now.rows !== undefined && now.rows > from.rows) {
    backlog -= await countWritten(db, sink, { pastCursor, head: from.head, after: from.rows, upTo: now.rows });
  }

  // New entries past the old head (and the cursors); the last slice runs to the head.
  const uncounted = sql<boolean>`${pastCursor} AND ${routedWithoutRow(sink, now.rows)}`;
  let head = from.head;
  let waiting = 0;
  for await (const [after, end] of slices(db, from.head, undefined, slice)) {
    if (end !== undefined) {
      backlog += await countEntries(db, after, end, uncounted);
      continue;
    }
    // One statement with the unnumbered (PostgreSQL): one numbered meanwhile is counted once, either way.
    const unnumberedCount = database.dialect === 'postgres' ? sql`(SELECT count(*) FROM deliveries d WHERE ${unnumbered} AND ${routedWithoutRow(sink)})` : sql`0`;
    const { rows } = await sql<{ counted: number; head: number; waiting: number }>`SELECT
      (SELECT count(*) FROM deliveries d WHERE d.seq > ${after} AND ${uncounted}) AS counted,
      (SELECT COALESCE(MAX(seq), ${after}) FROM deliveries WHERE seq > ${after}) AS head,
      ${unnumberedCount} AS waiting`.execute(db);
    backlog += Number(rows[0]!.counted);
    head = Number(rows[0]!.head);
    waiting = Number(rows[0]!.waiting);
  }
  // Rows past the settled id, written (or committed) since: they count for this call only.
  const written = now.rows === undefined ? 0 : await countWritten(db, sink, { pastCursor, head, after: now.rows });
  return { next: { cursors: now.cursors, head, backlog }, waiting, written };
}

/**
 * The entries past the cursors up to `head` that have a row of the sink with an id in (after, upTo]
 * (to the last row without `upTo`) and none up to `after`: read through the rows, by id.
 */
async function countWritten(
  db: Kysely<Schema>,
  sink: string,
  { pastCursor, head, after, upTo }: { pastCursor: RawBuilder<boolean>; head: number; after: number; upTo?: number },
): Promise<number> {
  const { rows } = await sql<{ written: number }>`SELECT count(*) AS written FROM deliveries d
    WHERE d.id IN (SELECT o.delivery_id FROM outbox o WHERE o.id > ${after}${upTo === undefined ? sql`` : sql` AND o.id <= ${upTo}`} AND o.sink = ${sink})
      AND ${pastCursor} AND d.seq <= ${head} AND ${routedWithoutRow(sink, after)}`.execute(db);
  return Number(rows[0]!.written);
}

/** SQL, for a delivery aliased `d`: its partition's position in `seqs` (null for a partition not in it). */
function byPart(seqs: Map<number, number>): RawBuilder<number> {
  return sql<number>`CASE d.part ${sql.join(
    [...seqs].map(([part, seq]) => sql`WHEN ${part} THEN CAST(${seq} AS bigint)`),
    sql` `,
  )} END`;
}

/** The entries in (after, end] that `where` takes. */
async function countEntries(db: Kysely<Schema>, after: number, end: number, where: RawBuilder<boolean>): Promise<number> {
  const { rows } = await sql<{ counted: number }>`SELECT count(*) AS counted FROM deliveries d
    WHERE d.seq > ${after} AND d.seq <= ${end} AND ${where}`.execute(db);
  return Number(rows[0]?.counted ?? 0);
}

/**
 * The log after `from` in ranges of `slice` entries up to `to`, with a turn of the event loop between
 * them; without `to`, the last range is open (`undefined`: to the head).
 */
async function* slices(db: Kysely<Schema>, from: number, to: number | undefined, slice: number): AsyncGenerator<[number, number | undefined]> {
  let after = from;
  for (;;) {
    const end = await sliceEnd(db, after, slice);
    if (end === undefined || (to !== undefined && end >= to)) {
      yield [after, to];
      return;
    }
    yield [after, end];
    after = end;
    await nextTurn();
  }
}

/** The position `slice` entries after `after`, or undefined when fewer are left. */
async function sliceEnd(db: Kysely<Schema>, after: number, slice: number): Promise<number | undefined> {
  const { rows } = await sql<{ seq: number }>`SELECT seq FROM deliveries
    WHERE seq > ${after} ORDER BY seq LIMIT 1 OFFSET ${slice - 1}`.execute(db);
  const [row] = rows;
  return row ? Number(row.seq) : undefined;
}
