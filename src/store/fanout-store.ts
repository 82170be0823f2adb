import { createArchiveLedger, type ArchiveLedger } from './archive/ledger.js';
import type { AuditNote } from './state/audit.js';
import type { Database } from './engines/database.js';
import { createDeadLetterStore, type DeadLetterStore } from './exceptions/dead-letters.js';
import { createOutboxClaims, type OutboxClaims } from './exceptions/claims.js';
import { rowsOfEvent } from './exceptions/event-rows.js';
import { queueReplay } from './exceptions/replay.js';
import { queueResend, type Resend } from './exceptions/resend.js';
import type { EventRow, Replay } from './exceptions/rows.js';
import { createLogCursors, type LogCursors } from './log/cursors.js';
import { readLog, type LogPage, type LogRead } from './log/read-log.js';

/** The delivery log as the sinks read it: positions, each sink's cursors per partition, and who reads which. */
export interface LogStore extends LogCursors {
  read(read: LogRead): Promise<LogPage>;
}

/** The exceptions: outbox rows (retries, dead letters, held, replayed and resent work) with their claims and leases. */
export interface ExceptionStore extends OutboxClaims, DeadLetterStore {
  /** New pending rows for the deliveries received since `since`; returns how many. With `audit`, recorded in the same transaction. */
  replay(replay: Replay, audit?: AuditNote): Promise<number>;
  /** A new pending row sending one event to one sink again; 0 when the event is not stored. With `audit`, recorded in the same transaction. */
  resend(resend: Resend, audit?: AuditNote): Promise<number>;
  /** Where one event stands with each sink: what the log says, then its rows. */
  rowsOfEvent(eventId: string): Promise<EventRow[]>;
}

/** The fan-out's storage: the log, and the exceptions to it. */
export interface FanoutStore {
  log: LogStore;
  exceptions: ExceptionStore;
  archive: ArchiveLedger;
}

export function createFanoutStore(database: Database): FanoutStore {
  return {
    log: { ...createLogCursors(database), read: (read) => readLog(database, read) },
    exceptions: {
      ...createOutboxClaims(database),
      ...createDeadLetterStore(database),
      replay: (replay, audit) => queueReplay(database, replay, audit),
      resend: (resend, audit) => queueResend(database, resend, audit),
      rowsOfEvent: (eventId) => rowsOfEvent(database, eventId),
    },
    archive: createArchiveLedger(database),
  };
}
