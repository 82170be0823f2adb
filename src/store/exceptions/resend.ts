import { sendAgain } from './rows.js';
import { writeAudited, type AuditNote } from '../state/audit.js';
import type { Database } from '../engines/database.js';

export interface Resend {
  eventId: string;
  sink: string;
  now: number;
}

/**
 * Sends one stored event to one sink again, whatever its status there, with a fresh attempt budget
 * (as a replay's row): its live row reopened (a pending one too: an attempt of it under way no longer
 * settles it), else a new pending row. With `audit`, recorded in the same transaction. Returns 0 (and
 * records nothing) when the event is not stored.
 */
export function queueResend(database: Database, { eventId, sink, now }: Resend, audit?: AuditNote): Promise<number> {
  const insert = sendAgain(database.kysely, sink, now, (deliveries) => deliveries.where('d.id', '=', eventId), { pendingStands: false });
  return writeAudited(database, insert, audit, { onlyIfChanged: true });
}
