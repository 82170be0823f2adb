import { sql } from 'kysely';
import { insertPending } from './rows.js';
import { writeAudited, type AuditNote } from '../state/audit.js';
import type { Database } from '../engines/database.js';

export interface Resend {
  eventId: string;
  sink: string;
  now: number;
}

/**
 * A new pending row sending one stored event to one sink again, whatever its status there, with a
 * fresh attempt budget (as a replay's row); the newest row of a sink is its status. With `audit`,
 * recorded in the same transaction. Returns 0 (and records nothing) when the event is not stored.
 */
export function queueResend(database: Database, { eventId, sink, now }: Resend, audit?: AuditNote): Promise<number> {
  const db = database.kysely;
  const insert = insertPending(db, sink, now, (deliveries) => deliveries.where('d.id', '=', eventId))
    // Already waiting for the sink (one open row per event and sink): due now, with a fresh budget.
    .onConflict((oc) =>
      oc.columns(['delivery_id', 'sink']).where(sql<boolean>`status = 'pending'`).doUpdateSet({ attempts: 0, next_attempt_at: now, updated_at: now }),
    );
  return writeAudited(database, insert, audit, ({ changed }) => changed > 0);
}
