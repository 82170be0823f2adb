import { setImmediate as nextTurn } from 'node:timers/promises';
import { sql, type Kysely } from 'kysely';
import type { Schema } from '../schema.js';
import type { Database } from '../engines/database.js';
import { comparePositions, routedWithoutRow, unnumbered, type Position } from './position.js';

/**
 * Log entries one counting statement reads at most: on SQLite a statement holds the receive thread,
 * so a large backlog is counted in slices with a turn of the event loop between them.
 */
export const BACKLOG_COUNT_SLICE = 5000;

/**
 * Per sink, the routed deliveries past its cursors or not yet numbered (PostgreSQL), less those already written
 * down as an outbox row (counted there, or settled) while the cursor's move is not yet stored.
 * Counted from each sink's least cursor, `slice` entries of the log index at a time.
 */
export async function countBacklogs(database: Database, slice = BACKLOG_COUNT_SLICE): Promise<{ sink: string; backlog: number }[]> {
  const db = database.kysely;
  const least = new Map<string, Position>();
  for (const row of await db.selectFrom('log_cursors').select(['sink', 'seq']).execute()) {
    const cursor = { seq: Number(row.seq) };
    const known = least.get(row.sink);
    if (known === undefined || comparePositions(cursor, known) < 0) least.set(row.sink, cursor);
  }
  const backlogs: { sink: string; backlog: number }[] = [];
  for (const [sink, from] of least) {
    let backlog = 0;
    for (let after: Position | undefined = from; after; ) {
      const end = await sliceEnd(db, after, slice);
      backlog += await countBetween(db, sink, after, end, database.dialect === 'postgres');
      after = end;
      if (end) await nextTurn();
    }
    backlogs.push({ sink, backlog });
  }
  return backlogs;
}

/** The position `slice` entries after `after`, or undefined when fewer are left (the last slice runs to the head). */
async function sliceEnd(db: Kysely<Schema>, after: Position, slice: number): Promise<Position | undefined> {
  const { rows } = await sql<{ seq: number }>`SELECT seq FROM deliveries
    WHERE seq > ${after.seq} ORDER BY seq LIMIT 1 OFFSET ${slice - 1}`.execute(db);
  const [row] = rows;
  return row ? { seq: Number(row.seq) } : undefined;
}

/**
 * The routed entries in (after, end] past their partition's cursor. The last slice (no `end`) adds,
 * with `withUnnumbered`, the stored deliveries not yet given a position, in the same statement: one
 * numbered meanwhile is counted once, either way.
 */
async function countBetween(db: Kysely<Schema>, sink: string, after: Position, end: Position | undefined, withUnnumbered: boolean): Promise<number> {
  const upTo = end ? sql`AND d.seq <= ${end.seq}` : sql``;
  const waiting =
    end === undefined && withUnnumbered
      ? sql`+ (SELECT count(*) FROM deliveries d WHERE ${unnumbered} AND ${routedWithoutRow(sink)})`
      : sql``;
  const { rows } = await sql<{ backlog: number }>`
    SELECT (SELECT count(*) FROM deliveries d JOIN log_cursors c ON c.sink = ${sink} AND c.part = d.part
      WHERE d.seq > ${after.seq} ${upTo} AND d.seq > c.seq AND ${routedWithoutRow(sink)}) ${waiting} AS backlog`.execute(db);
  return Number(rows[0]?.backlog ?? 0);
}
