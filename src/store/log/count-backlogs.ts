import { setImmediate as nextTurn } from 'node:timers/promises';
import { sql, type Kysely } from 'kysely';
import type { Schema } from '../schema.js';
import { comparePositions, routedWithoutRow, type Position } from './position.js';

/**
 * Log entries one counting statement reads at most. On SQLite a statement holds the receive thread
 * (about 1.5 µs an entry on a slow core), so one count of a backlog of 600,000 stalled intake for a
 * second at each scrape during an outage; counted in slices, with a turn of the event loop between
 * them, the stall is a few milliseconds.
 */
export const BACKLOG_COUNT_SLICE = 5000;

/**
 * Per sink, the routed deliveries past its cursors, less those already written down as an outbox
 * row (counted there, or settled) while the cursor's move is not yet stored. Counted from each
 * sink's least cursor, `slice` entries of the log index at a time.
 */
export async function countBacklogs(db: Kysely<Schema>, slice = BACKLOG_COUNT_SLICE): Promise<{ sink: string; backlog: number }[]> {
  const least = new Map<string, Position>();
  for (const row of await db.selectFrom('log_cursors').select(['sink', 'xid', 'seq']).execute()) {
    const cursor = { xid: Number(row.xid), seq: Number(row.seq) };
    const known = least.get(row.sink);
    if (known === undefined || comparePositions(cursor, known) < 0) least.set(row.sink, cursor);
  }
  const backlogs: { sink: string; backlog: number }[] = [];
  for (const [sink, from] of least) {
    let backlog = 0;
    for (let after: Position | undefined = from; after; ) {
      const end = await sliceEnd(db, after, slice);
      backlog += await countBetween(db, sink, after, end);
      after = end;
      if (end) await nextTurn();
    }
    backlogs.push({ sink, backlog });
  }
  return backlogs;
}

/** The position `slice` entries after `after`, or undefined when fewer are left (the last slice runs to the head). */
async function sliceEnd(db: Kysely<Schema>, after: Position, slice: number): Promise<Position | undefined> {
  const { rows } = await sql<{ log_xid: number; seq: number }>`SELECT log_xid, seq FROM deliveries
    WHERE seq IS NOT NULL AND (log_xid, seq) > (${after.xid}, ${after.seq})
    ORDER BY log_xid, seq LIMIT 1 OFFSET ${slice - 1}`.execute(db);
  const [row] = rows;
  return row ? { xid: Number(row.log_xid), seq: Number(row.seq) } : undefined;
}

async function countBetween(db: Kysely<Schema>, sink: string, after: Position, end: Position | undefined): Promise<number> {
  const upTo = end ? sql`AND (d.log_xid, d.seq) <= (${end.xid}, ${end.seq})` : sql``;
  const { rows } = await sql<{ backlog: number }>`
    SELECT count(*) AS backlog FROM deliveries d JOIN log_cursors c ON c.sink = ${sink} AND c.part = d.part
    WHERE d.seq IS NOT NULL AND (d.log_xid, d.seq) > (${after.xid}, ${after.seq}) ${upTo} AND (d.log_xid, d.seq) > (c.xid, c.seq)
      AND ${routedWithoutRow(sink)}`.execute(db);
  return Number(rows[0]?.backlog ?? 0);
}
