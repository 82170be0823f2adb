import { sql } from 'kysely';
import type { Database } from '../engines/database.js';
import { routedWithoutRow, type Position } from './position.js';

/** A delivery as a sink's lane reads it from the log. */
export interface LogEntry extends Position {
  part: number;
  id: string;
  /** The sinks it was routed to when accepted (comma-joined). */
  sinks: string | null;
  boxId: string | null;
  payload: string;
  origin: string | null;
  traceparent: string | null;
}

export interface LogRead {
  sink: string;
  /** The partitions the reader holds: only their entries are read. */
  parts: number[];
  after: Position;
  limit: number;
}

export interface LogPage {
  entries: LogEntry[];
  /** Every entry of the held partitions routed to the sink up to here is in `entries` (or has a row of the sink). */
  seenUpTo: Position;
}

/** The newest position given (on PostgreSQL, numbered in commit order: a snapshot that sees one sees all before it). */
const HEAD = sql<number>`(SELECT COALESCE(MAX(seq), 0) FROM deliveries WHERE seq IS NOT NULL)`;

/**
 * Up to `limit` entries after `after`, in log order: only of the reader's partitions, routed to the
 * sink, and without an outbox row of it (an exception written before a crash let the cursor be
 * stored is not sent again from the log). One statement, so one snapshot, reads the head too (a row
 * of its own, after the page): every position up to it is given and committed, so a page that is
 * not full has seen the log up to it.
 */
export async function readLog(database: Database, { sink, parts, after, limit }: LogRead): Promise<LogPage> {
  const db = database.kysely;
  if (parts.length === 0) return { entries: [], seenUpTo: after };
  const { rows } = await sql<{
    seq: number | null;
    part: number;
    id: string;
    sinks: string | null;
    box_id: string | null;
    payload: string;
    origin: string | null;
    trace_parent: string | null;
    head: number;
  }>`SELECT * FROM (SELECT d.seq, d.part, d.id, d.sinks, d.box_id, d.payload, d.origin, d.trace_parent, CAST(NULL AS bigint) AS head FROM deliveries d
      WHERE d.seq > ${after.seq} AND d.seq <= ${HEAD} AND d.part IN (${sql.join(parts)}) AND ${routedWithoutRow(sink)}
      ORDER BY d.seq LIMIT ${limit}) AS page
    UNION ALL SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, ${HEAD}`.execute(db);
  const head = Number(rows.find((row) => row.seq === null)?.head ?? 0);
  const entries = rows
    .filter((row) => row.seq !== null)
    .map((row) => ({
      seq: Number(row.seq),
      part: row.part,
      id: row.id,
      sinks: row.sinks,
      boxId: row.box_id,
      payload: row.payload,
      origin: row.origin,
      traceparent: row.trace_parent,
    }))
    // UNION ALL promises no order of its own.
    .sort((a, b) => a.seq - b.seq);
  const last = entries[entries.length - 1];
  return { entries, seenUpTo: entries.length === limit && last ? { seq: last.seq } : { seq: Math.max(head, after.seq) } };
}
