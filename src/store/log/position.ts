import { sql, type RawBuilder } from 'kysely';
import type { Database } from '../engines/database.js';

/**
 * A place in the delivery log: the relay's own number, given in commit order (on SQLite by the one
 * writer as it inserts, on PostgreSQL by the sequencer after commit). It moves with the database:
 * a dump, a snapshot or a replica keeps it, whatever cluster serves it.
 */
export interface Position {
  seq: number;
}

export const LOG_START: Position = { seq: 0 };

/**
 * The last position given: the newest delivery's, or a cursor's beyond it. Retention removes
 * deliveries every cursor has passed, the newest too; numbering from the deliveries left would give
 * a new one a position the cursors have already passed.
 */
export function logHeadSql(dialect: Database['dialect']): string {
  const greatest = dialect === 'postgres' ? 'GREATEST' : 'max';
  return `${greatest}((SELECT COALESCE(MAX(seq), 0) FROM deliveries WHERE seq IS NOT NULL), (SELECT COALESCE(MAX(seq), 0) FROM log_cursors))`;
}

/** Each sink's log is split by box into this many partitions, each read by one process at a time. */
export const PART_COUNT = 16;

export const PARTS: readonly number[] = Array.from({ length: PART_COUNT }, (_, part) => part);

export function comparePositions(a: Position, b: Position): number {
  return a.seq - b.seq;
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
 * SQL, for a delivery aliased `d`: routed to `sink` (a value, or a column such as `c.sink`), the rule
 * of `routedTo`. Every query of the log (reads, backlog counts, set-aside, retention) routes by it.
 */
export const routedSql = (sink: string | RawBuilder<unknown>): RawBuilder<boolean> =>
  sql<boolean>`(',' || d.sinks || ',') LIKE ('%,' || ${sink} || ',%')`;

/** SQL, for a delivery aliased `d`: stored and routed, not yet given a position (PostgreSQL numbers it after commit). */
export const unnumbered = sql<boolean>`d.seq IS NULL AND d.sinks IS NOT NULL`;

/**
 * SQL: routed to `sink` and without an outbox row of it (a row counts or settles it instead); with
 * `rowsUpTo`, without one of the rows whose id is at most that.
 */
export const routedWithoutRow = (sink: string, rowsUpTo?: number): RawBuilder<boolean> =>
  sql<boolean>`${routedSql(sink)} AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.delivery_id = d.id AND o.sink = ${sink}${
    rowsUpTo === undefined ? sql`` : sql` AND o.id <= ${rowsUpTo}`
  })`;
