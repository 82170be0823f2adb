import type { HeldAs } from '../store/exceptions/claims.js';
import type { Sink } from '../sinks/sink.js';
import type { NewException } from '../store/exceptions/claims.js';
import type { ClaimedRow } from '../store/exceptions/rows.js';
import type { LogEntry } from '../store/log/read-log.js';

/** How an event is tried: normally, or as the one probe attempt of a sink paused by its failures. */
export type Trial = 'normal' | 'probe';

/** What an attempt run needs of an event, whether a claimed outbox row or a log entry. */
export interface Work {
  eventId: string;
  /** The claimed row's id and version; none for a log entry. */
  rowId?: number | undefined;
  rowVersion?: number | undefined;
  /** A log entry's partition as the lane holds it (its writes are fenced by it); none for a row. */
  heldAs?: HeldAs | undefined;
  /** Attempts made before (0 for a fresh event: quick retries in process). */
  attempts: number;
  boxId: string | null;
  traceparent: string | null;
  payload: string;
  origin: string | null;
}

export const workOfRow = (row: ClaimedRow): Work => ({
  eventId: row.deliveryId,
  rowId: row.id,
  rowVersion: row.version,
  attempts: row.attempts,
  boxId: row.boxId,
  traceparent: row.traceparent,
  payload: row.payload ?? '',
  origin: row.origin,
});

export const workOfEntry = (entry: LogEntry): Work => ({
  eventId: entry.id,
  attempts: 0,
  boxId: entry.boxId,
  traceparent: entry.traceparent,
  payload: entry.payload,
  origin: entry.origin,
});

/** The outbox row of a log entry's outcome. */
export const exceptionOf = (
  sink: Sink,
  entry: LogEntry,
  outcome: Pick<NewException, 'status' | 'attempts' | 'lastError' | 'nextAttemptAt' | 'now'>,
): NewException => ({
  deliveryId: entry.id,
  sink: sink.name,
  boxId: entry.boxId,
  traceparent: entry.traceparent,
  ...outcome,
});

/**
 * What an event's attempts come to, to be written down. `wait`: another attempt later (or when a
 * paused sink resumes); `held`: paused before any attempt started, it waits as it was; `lost`: its
 * lease went to another holder before an attempt started, so it is theirs to settle.
 */
export type Verdict =
  | { kind: 'delivered'; attempts: number; lastError: string | null; now: number }
  | { kind: 'dead'; attempts: number; lastError: string; now: number }
  | { kind: 'wait'; attempts: number; lastError: string; nextAttemptAt: number; now: number }
  | { kind: 'held'; now: number }
  | { kind: 'lost' }
  | { kind: 'undone' };

/** How a log entry ended here: `waiting` for a retry as an outbox row (its box's later events wait behind it), or `undone` (a stop). */
export type EntryFate = 'delivered' | 'dead' | 'waiting' | 'undone';
