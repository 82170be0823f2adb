import { sql } from 'kysely';
import type { Database } from '../engines/database.js';
import type { Position } from './position.js';

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

/**
 * Up to `limit` deliveries after `after`, in log order, from the log index. On PostgreSQL only those
 * of transactions older than every one still running, read in one statement (one snapshot): a
 * transaction that commits later can never take a place a reader has passed.
 */
export async function readLog(database: Database, after: Position, limit: number): Promise<LogEntry[]> {
  const final = database.dialect === 'postgres' ? sql`AND log_xid < (pg_snapshot_xmin(pg_current_snapshot())::text)::bigint` : sql``;
  const { rows } = await sql<{
    log_xid: number;
    seq: number;
    part: number;
    id: string;
    sinks: string | null;
    box_id: string | null;
    payload: string;
    origin: string | null;
    trace_parent: string | null;
  }>`SELECT log_xid, seq, part, id, sinks, box_id, payload, origin, trace_parent FROM deliveries
    WHERE seq IS NOT NULL AND (log_xid, seq) > (${after.xid}, ${after.seq}) ${final}
    ORDER BY log_xid, seq LIMIT ${limit}`.execute(database.kysely);
  return rows.map((row) => ({
    xid: Number(row.log_xid),
    seq: Number(row.seq),
    part: row.part,
    id: row.id,
    sinks: row.sinks,
    boxId: row.box_id,
    payload: row.payload,
    origin: row.origin,
    traceparent: row.trace_parent,
  }));
}
