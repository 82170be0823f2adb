import type { AuditNote } from '../state/audit.js';
import type { Database } from '../engines/database.js';
import { createDeadLetterStore, type DeadLetterStore } from './dead-letters.js';
import { createOutboxClaims, type OutboxClaims } from './claims.js';
import { rowsOfEvent } from './event-rows.js';
import { createLogCursors, type LogCursors } from '../log/cursors.js';
import { readLog, type LogPage, type LogRead } from '../log/read-log.js';
import { queueReplay } from './replay.js';
import { queueResend, type Resend } from './resend.js';
import type { EventRow, Replay } from './rows.js';

/**
 * The fan-out's storage: the delivery log read by cursors, and the exceptions (outbox rows: retries,
 * dead letters, held and replayed work) with their claims and leases.
 */
export interface Outbox extends OutboxClaims, DeadLetterStore, LogCursors {
  /** New pending rows for the deliveries received since `since`; returns how many. With `audit`, recorded in the same transaction. */
  replay(replay: Replay, audit?: AuditNote): Promise<number>;
  /** A new pending row sending one event to one sink again; 0 when the event is not stored. With `audit`, recorded in the same transaction. */
  resend(resend: Resend, audit?: AuditNote): Promise<number>;
  rowsOfEvent(eventId: string): Promise<EventRow[]>;
  readLog(read: LogRead): Promise<LogPage>;
}

export function createOutbox(database: Database): Outbox {
  return {
    ...createOutboxClaims(database),
    ...createDeadLetterStore(database),
    ...createLogCursors(database),
    replay: (replay, audit) => queueReplay(database, replay, audit),
    resend: (resend, audit) => queueResend(database, resend, audit),
    rowsOfEvent: (eventId) => rowsOfEvent(database, eventId),
    readLog: (read) => readLog(database, read),
  };
}
