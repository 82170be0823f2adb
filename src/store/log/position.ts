import { sql, type RawBuilder } from 'kysely';

/**
 * A place in the delivery log: `(xid, seq)`, compared in that order. On SQLite `xid` is always 0;
 * on PostgreSQL it is the id of the transaction that stored the delivery (migration 012).
 */
export interface Position {
  xid: number;
  seq: number;
}

export const LOG_START: Position = { xid: 0, seq: 0 };

/**
 * SQLite's last `seq`: the newest delivery's, or a cursor's beyond it. Retention removes deliveries
 * every cursor has passed, the newest too; numbering from the deliveries left would give a new one
 * a `seq` the cursors have already passed.
 */
export const SQLITE_LOG_HEAD = `max(
    (SELECT COALESCE(MAX(seq), 0) FROM deliveries WHERE log_xid = 0 AND seq IS NOT NULL),
    (SELECT COALESCE(MAX(seq), 0) FROM log_cursors WHERE xid = 0))`;

/** Each sink's log is split by box into this many partitions, each read by one process at a time. */
export const PART_COUNT = 16;

export const PARTS: readonly number[] = Array.from({ length: PART_COUNT }, (_, part) => part);

export function comparePositions(a: Position, b: Position): number {
  return a.xid - b.xid || a.seq - b.seq;
}

export const later = (a: Position, b: Position): Position => (comparePositions(a, b) >= 0 ? a : b);

/** The partition of a box's events (FNV-1a of its id), so one box's events keep their order in one partition. */
export function partOf(boxId: string | null): number {
  if (boxId === null) return 0;
  let hash = 0x811c9dc5;
  for (let i = 0; i < boxId.length; i++) hash = Math.imul(hash ^ boxId.charCodeAt(i), 0x01000193);
  return (hash >>> 0) % PART_COUNT;
}

/** The routed sinks of a stored delivery, as the `sinks` column keeps them. */
export const joinSinks = (sinks: readonly string[]): string => sinks.join(',');

export const routedTo = (sinks: string | null, sink: string): boolean => sinks !== null && `,${sinks},`.includes(`,${sink},`);

/**
 * SQL, for a delivery aliased `d`: routed to `sink` (the rule of `routedTo`) and without an outbox
 * row of that sink (a row counts or settles it instead).
 */
export const routedWithoutRow = (sink: string): RawBuilder<unknown> =>
  sql`(',' || d.sinks || ',') LIKE ${`%,${sink},%`} AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.delivery_id = d.id AND o.sink = ${sink})`;
