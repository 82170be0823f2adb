import { sql, type Kysely, type Selectable } from 'kysely';
import type { Database } from './database.js';
import { executeUnsynced } from './unsynced.js';
import type { OutboxStatus, OutboxTable, Schema } from './schema.js';

/** A row the dispatcher holds a lease on, with the stored event (null when pruned meanwhile). */
export interface ClaimedRow {
  id: number;
  deliveryId: string;
  sink: string;
  attempts: number;
  payload: string | null;
  origin: string | null;
}

export interface DeadLetter {
  id: number;
  eventId: string;
  sink: string;
  attempts: number;
  lastError: string | null;
  /** Epoch ms. */
  failedAt: number;
}

/** An event's outbox row as the admin API reads it. */
export interface EventRow {
  sink: string;
  status: OutboxStatus;
  attempts: number;
  lastError: string | null;
  /** Epoch ms of the last change (for a dead letter, when it failed). */
  updatedAt: number;
}

export interface Claim {
  sink: string;
  owner: string;
  now: number;
  leaseMs: number;
  limit: number;
}

/** The outcome of a row's attempts, written back by the process that holds its lease. */
export interface Settled {
  id: number;
  owner: string;
  attempts: number;
  lastError: string;
  now: number;
}

export interface Replay {
  /** Epoch ms: deliveries received at or after this. */
  since: number;
  now: number;
  /** The configured sinks an event type fans out to (the receiver's router). */
  sinksFor(type: string): string[];
  /** Only this sink (still within its event filter). */
  sink?: string | undefined;
}

export const SINK_NOT_CONFIGURED = 'sink not configured';

const deadLetterColumns = ['id', 'delivery_id', 'sink', 'attempts', 'last_error', 'updated_at'] as const;

function toDeadLetter(r: Pick<Selectable<OutboxTable>, (typeof deadLetterColumns)[number]>): DeadLetter {
  return { id: r.id, eventId: r.delivery_id, sink: r.sink, attempts: r.attempts, lastError: r.last_error, failedAt: r.updated_at };
}

export type Outbox = ReturnType<typeof createOutbox>;

/**
 * The fan-out work queue. Every write is one statement, atomic by itself: on SQLite the connection
 * is shared with the group-commit writer, so no Kysely transaction may be opened on it.
 */
export function createOutbox(database: Database) {
  const db: Kysely<Schema> = database.kysely;
  const postgres = database.dialect === 'postgres';
  const leaseCleared = { lease_owner: null, lease_until: null } as const;

  const deadLetters = (sink: string | undefined) =>
    db
      .selectFrom('outbox')
      .where('status', '=', 'dead')
      .$if(sink !== undefined, (q) => q.where('sink', '=', sink as string));

  return {
    /**
     * Leases up to `limit` due rows of one sink, in due order (which is arrival order for fresh work).
     * On PostgreSQL, SKIP LOCKED lets replicas claim side by side; a lease that is not settled
     * (a dead process) expires and the row becomes due again. The lease needs no fsync of its own.
     */
    async claim({ sink, owner, now, leaseMs, limit }: Claim): Promise<ClaimedRow[]> {
      const due = db
        .selectFrom('outbox')
        .select('id')
        .where('status', '=', 'pending')
        .where('sink', '=', sink)
        .where('next_attempt_at', '<=', now)
        .where((eb) => eb.or([eb('lease_until', 'is', null), eb('lease_until', '<=', now)]))
        .orderBy('next_attempt_at')
        .orderBy('id')
        .limit(limit)
        .$if(postgres, (q) => q.forUpdate().skipLocked());
      const rows = await executeUnsynced(
        database,
        db
          .updateTable('outbox')
          .set({ lease_owner: owner, lease_until: now + leaseMs })
          .where('id', 'in', due)
          .returning(['id', 'delivery_id', 'sink', 'attempts', 'next_attempt_at']),
      );
      if (rows.length === 0) return [];
      // RETURNING has no defined order.
      rows.sort((a, b) => a.next_attempt_at - b.next_attempt_at || a.id - b.id);
      const stored = await db
        .selectFrom('deliveries')
        .select(['id', 'payload', 'origin'])
        .where('id', 'in', [...new Set(rows.map((r) => r.delivery_id))])
        .execute();
      const events = new Map(stored.map((d) => [d.id, d]));
      return rows.map((r) => ({
        id: r.id,
        deliveryId: r.delivery_id,
        sink: r.sink,
        attempts: r.attempts,
        payload: events.get(r.delivery_id)?.payload ?? null,
        origin: events.get(r.delivery_id)?.origin ?? null,
      }));
    },

    /**
     * When a lane should look again: the earliest time a row of this sink that `owner` does not
     * hold becomes claimable (its due time, or the end of another process's lease). Null: nothing.
     */
    async nextDueAt(sink: string, owner: string): Promise<number | null> {
      const row = await db
        .selectFrom('outbox')
        .select(
          sql<number | null>`MIN(CASE WHEN lease_owner = ${owner} THEN NULL
            WHEN lease_until > next_attempt_at THEN lease_until ELSE next_attempt_at END)`.as('due'),
        )
        .where('status', '=', 'pending')
        .where('sink', '=', sink)
        .executeTakeFirst();
      return row?.due == null ? null : Number(row.due);
    },

    /**
     * Delivered rows are deleted: the outbox keeps only work and dead letters, so it stays small. A
     * delete lost to a power failure only sends the event again, so it needs no fsync of its own.
     */
    async removeDelivered(ids: number[]): Promise<void> {
      await executeUnsynced(database, db.deleteFrom('outbox').where('id', 'in', ids).where('status', '=', 'pending'));
    },

    /** Another attempt later; only while the lease is still ours (otherwise another process has it). */
    async scheduleRetry({ id, owner, attempts, lastError, now }: Settled, nextAttemptAt: number): Promise<void> {
      await db
        .updateTable('outbox')
        .set({ attempts, next_attempt_at: nextAttemptAt, last_error: lastError, updated_at: now, ...leaseCleared })
        .where('id', '=', id)
        .where('status', '=', 'pending')
        .where('lease_owner', '=', owner)
        .execute();
    },

    /** A dead letter: kept with its attempts and last error; `updated_at` is when it failed. */
    async markDead({ id, owner, attempts, lastError, now }: Settled): Promise<void> {
      await db
        .updateTable('outbox')
        .set({ status: 'dead', attempts, last_error: lastError, updated_at: now, ...leaseCleared })
        .where('id', '=', id)
        .where('status', '=', 'pending')
        .where('lease_owner', '=', owner)
        .execute();
    },

    /** Gives rows back untouched (a stopping process), so they are due again at once. */
    async release(ids: number[], owner: string): Promise<void> {
      if (ids.length === 0) return;
      await db
        .updateTable('outbox')
        .set(leaseCleared)
        .where('id', 'in', ids)
        .where('status', '=', 'pending')
        .where('lease_owner', '=', owner)
        .execute();
    },

    /** Clears every lease: for SQLite, where only one process serves the file, so any lease is stale. */
    async releaseAll(): Promise<number> {
      const result = await db
        .updateTable('outbox')
        .set(leaseCleared)
        .where('status', '=', 'pending')
        .where('lease_owner', 'is not', null)
        .executeTakeFirst();
      return Number(result.numUpdatedRows);
    },

    /**
     * Pending work of sinks no longer configured becomes dead letters instead of waiting forever;
     * returns how many rows of each such sink. One statement a sink: each is atomic, and the counts
     * name the sinks without reading back every row.
     */
    async setAside(configured: string[], now: number): Promise<Record<string, number>> {
      const unknown = await db
        .selectFrom('outbox')
        .select('sink')
        .distinct()
        .where('status', '=', 'pending')
        .$if(configured.length > 0, (q) => q.where('sink', 'not in', configured))
        .execute();
      const setAside: Record<string, number> = {};
      for (const { sink } of unknown) {
        const result = await db
          .updateTable('outbox')
          .set({ status: 'dead', last_error: SINK_NOT_CONFIGURED, updated_at: now, ...leaseCleared })
          .where('status', '=', 'pending')
          .where('sink', '=', sink)
          .executeTakeFirst();
        if (result.numUpdatedRows > 0n) setAside[sink] = Number(result.numUpdatedRows);
      }
      return setAside;
    },

    async countBySink(status: 'pending' | 'dead'): Promise<Record<string, number>> {
      const rows = await db
        .selectFrom('outbox')
        .select(['sink', (eb) => eb.fn.countAll<number>().as('count')])
        .where('status', '=', status)
        .groupBy('sink')
        .execute();
      return Object.fromEntries(rows.map((r) => [r.sink, Number(r.count)]));
    },

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

    /** The rows one event still has (delivered rows are gone), oldest first. */
    async rowsOfEvent(eventId: string): Promise<EventRow[]> {
      const rows = await db
        .selectFrom('outbox')
        .select(['sink', 'status', 'attempts', 'last_error', 'updated_at'])
        .where('delivery_id', '=', eventId)
        .orderBy('id')
        .execute();
      return rows.map((r) => ({ sink: r.sink, status: r.status, attempts: r.attempts, lastError: r.last_error, updatedAt: r.updated_at }));
    },

    async findDeadLetter(id: number): Promise<DeadLetter | undefined> {
      const row = await deadLetters(undefined).select(deadLetterColumns).where('id', '=', id).executeTakeFirst();
      return row && toDeadLetter(row);
    },

    /** Dead letters back to pending with a fresh attempt budget, for configured sinks only. */
    async retryDeadLetters({ id, sink, configured, now }: { id?: number; sink?: string | undefined; configured: string[]; now: number }): Promise<number> {
      if (configured.length === 0) return 0;
      const result = await db
        .updateTable('outbox')
        .set({ status: 'pending', attempts: 0, next_attempt_at: now, updated_at: now, ...leaseCleared })
        .where('status', '=', 'dead')
        .where('sink', 'in', configured)
        .$if(id !== undefined, (q) => q.where('id', '=', id as number))
        .$if(sink !== undefined, (q) => q.where('sink', '=', sink as string))
        .executeTakeFirst();
      return Number(result.numUpdatedRows);
    },

    async discardDeadLetters({ id, sink }: { id?: number; sink?: string | undefined }): Promise<number> {
      const result = await db
        .deleteFrom('outbox')
        .where('status', '=', 'dead')
        .$if(id !== undefined, (q) => q.where('id', '=', id as number))
        .$if(sink !== undefined, (q) => q.where('sink', '=', sink as string))
        .executeTakeFirst();
      return Number(result.numDeletedRows);
    },

    /**
     * New pending rows for the stored deliveries received since `since`, for every sink whose event
     * filter takes the event's type (or just `sink`). They keep the event id, so receivers (and
     * JetStream's duplicate window) can tell a replay from a new event. One statement per sink.
     */
    async replay({ since, now, sinksFor, sink }: Replay): Promise<number> {
      const types = await db
        .selectFrom('deliveries')
        .select('type')
        .distinct()
        .where('received_at', '>=', since)
        .execute();
      const typesBySink = new Map<string, string[]>();
      for (const { type } of types) {
        for (const target of sinksFor(type)) {
          if (sink === undefined || target === sink) typesBySink.set(target, [...(typesBySink.get(target) ?? []), type]);
        }
      }
      let queued = 0;
      for (const [target, sinkTypes] of typesBySink) {
        const result = await db
          .insertInto('outbox')
          .columns(['delivery_id', 'sink', 'status', 'attempts', 'next_attempt_at', 'created_at', 'updated_at'])
          .expression(
            db
              .selectFrom('deliveries')
              .select([
                'id',
                sql.val(target).as('sink'),
                sql.val('pending').as('status'),
                sql.val(0).as('attempts'),
                sql.val(now).as('next_attempt_at'),
                sql.val(now).as('created_at'),
                sql.val(now).as('updated_at'),
              ])
              .where('received_at', '>=', since)
              .where('type', 'in', sinkTypes)
              .orderBy('received_at')
              .orderBy('id'),
          )
          .executeTakeFirst();
        queued += Number(result.numInsertedOrUpdatedRows ?? 0);
      }
      return queued;
    },
  };
}
