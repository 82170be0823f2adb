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

/**
 * Up to `limit` entries after `after`, in log order: only of the reader's partitions, routed to the
 * sink, and without an outbox row of it (an exception written before a crash let the cursor be
 * stored is not sent again from the log). The head is read first: every position up to it is given
 * and committed, so a page that is not full has seen the log up to it.
 */
export async function readLog(database: Database, { sink, parts, after, limit }: LogRead): Promise<LogPage> {
  const db = database.kysely;
  if (parts.length === 0) return { entries: [], seenUpTo: after };
  const { rows: heads } = await sql<{ head: number }>`SELECT COALESCE(MAX(seq), 0) AS head FROM deliveries WHERE seq IS NOT NULL`.execute(db);
  const head = Number(heads[0]?.head ?? 0);
  if (head <= after.seq) return { entries: [], seenUpTo: after };
  const { rows } = await sql<{
    seq: number;
    part: number;
    id: string;
    sinks: string | null;
    box_id: string | null;
    payload: string;
    origin: string | null;
    trace_parent: string | null;
  }>`SELECT d.seq, d.part, d.id, d.sinks, d.box_id, d.payload, d.origin, d.trace_parent FROM deliveries d
    WHERE d.seq > ${after.seq} AND d.seq <= ${head} AND d.part IN (${sql.join(parts)}) AND ${routedWithoutRow(sink)}
    ORDER BY d.seq LIMIT ${limit}`.execute(db);
  const entries = rows.map((row) => ({
    seq: Number(row.seq),
    part: row.part,
    id: row.id,
    sinks: row.sinks,
    boxId: row.box_id,
    payload: row.payload,
    origin: row.origin,
    traceparent: row.trace_parent,
  }));
  const last = entries[entries.length - 1];
  return { entries, seenUpTo: entries.length === limit && last ? { seq: last.seq } : { seq: head } };
}
