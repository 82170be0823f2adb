import type { Kysely, Selectable } from 'kysely';
import { writeAudited, type AuditNote } from '../state/audit.js';
import type { Database } from '../engines/database.js';
import { DEAD_LETTER, reopened, type DeadLetter } from './rows.js';
import type { OutboxTable, Schema } from '../schema.js';

/** Fan-out rows a sink gave up on: listed, sent again with a fresh attempt budget, or discarded. */
export interface DeadLetterStore {
  listDeadLetters(query: { sink?: string | undefined; after?: number | undefined; limit: number }): Promise<DeadLetter[]>;
  findDeadLetter(id: number): Promise<DeadLetter | undefined>;
  /** With `audit`, the operator's change is recorded in the same transaction. */
  retryDeadLetters(selection: { id?: number; sink?: string | undefined; configured: string[]; now: number }, audit?: AuditNote): Promise<number>;
  /** With `audit`, recorded in the same transaction; a discard of one id that finds none records nothing (refused). */
  discardDeadLetters(selection: { id?: number; sink?: string | undefined; now: number }, audit?: AuditNote): Promise<number>;
}

const deadLetterColumns = ['id', 'delivery_id', 'sink', 'attempts', 'last_error', 'updated_at'] as const;

function toDeadLetter(r: Pick<Selectable<OutboxTable>, (typeof deadLetterColumns)[number]>): DeadLetter {
  return { id: r.id, eventId: r.delivery_id, sink: r.sink, attempts: r.attempts, lastError: r.last_error, failedAt: r.updated_at };
}

export function createDeadLetterStore(database: Database): DeadLetterStore {
  const db: Kysely<Schema> = database.kysely;
  const deadLetters = (sink: string | undefined) =>
    db
      .selectFrom('outbox')
      .where(DEAD_LETTER)
      .$if(sink !== undefined, (q) => q.where('sink', '=', sink as string));

  return {
    /** Dead letters in id order after the cursor id; ask for one more than a page to learn if more follow. */
    async listDeadLetters({ sink, after, limit }: { sink?: string | undefined; after?: number | undefined; limit: number }): Promise<DeadLetter[]> {
      const rows = await deadLetters(sink)
        .select(deadLetterColumns)
        .$if(after !== undefined, (q) => q.where('id', '>', after as number))
        .orderBy('id')
        .limit(limit)
        .execute();
      return rows.map(toDeadLetter);
    },

    async findDeadLetter(id: number): Promise<DeadLetter | undefined> {
      const row = await deadLetters(undefined).select(deadLetterColumns).where('id', '=', id).executeTakeFirst();
      return row && toDeadLetter(row);
    },

    /**
     * Dead letters back to pending with a fresh attempt budget, for configured sinks only. An event
     * has one live row per sink (`outbox_live`): each retried event is pending once per sink.
     */
    async retryDeadLetters(
      { id, sink, configured, now }: { id?: number; sink?: string | undefined; configured: string[]; now: number },
      audit?: AuditNote,
    ): Promise<number> {
      const retry = db
        .updateTable('outbox')
        .set(reopened(now))
        .where(DEAD_LETTER)
        .where('sink', 'in', configured)
        .$if(id !== undefined, (q) => q.where('id', '=', id as number))
        .$if(sink !== undefined, (q) => q.where('sink', '=', sink as string));
      return writeAudited(database, configured.length === 0 ? undefined : retry, audit);
    },

    /** Kept as `discarded` (its attempts and last error with it), so the event's status says so until retention. */
    async discardDeadLetters({ id, sink, now }: { id?: number; sink?: string | undefined; now: number }, audit?: AuditNote): Promise<number> {
      const discard = db
        .updateTable('outbox')
        .set({ status: 'discarded', updated_at: now })
        .where(DEAD_LETTER)
        .$if(id !== undefined, (q) => q.where('id', '=', id as number))
        .$if(sink !== undefined, (q) => q.where('sink', '=', sink as string));
      return writeAudited(database, discard, audit, { onlyIfChanged: id !== undefined });
    },
  };
}
