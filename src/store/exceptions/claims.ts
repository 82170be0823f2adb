import { sql, type Kysely } from 'kysely';
import type { Database } from '../engines/database.js';
import { leaseClock } from '../engines/database-clock.js';
import { DEAD_LETTER, LEASE_CLEARED, SINK_NOT_CONFIGURED, type Claim, type ClaimedRow, type Delivered, type Settled } from './rows.js';
import type { Schema } from '../schema.js';
import { createBacklogCount } from '../log/count-backlogs.js';
import { SET_ASIDE_BATCH, SetAsideError, inSteps, setAsideLog, type StepsRun } from '../log/set-aside.js';
import { executeUnsynced } from '../engines/unsynced.js';

/** Claiming and leasing fan-out rows, and writing back what their attempts did. */
export interface OutboxClaims {
  claim(claim: Claim): Promise<ClaimedRow[]>;
  nextDueAt(sink: string, owner: string): Promise<number | null>;
  /**
   * Rows the sink acknowledged, kept with their attempts and last error (whoever holds them now).
   * Returns the ids of those reopened since their claim (a resend): still pending, to be sent again.
   */
  markDelivered(rows: Delivered[]): Promise<number[]>;
  /** True when the row was still this process's to settle (held, and not reopened since its claim). */
  scheduleRetry(settled: Settled, nextAttemptAt: number): Promise<boolean>;
  /** True when the row was still this process's to settle (held, and not reopened since its claim). */
  markDead(settled: Settled): Promise<boolean>;
  release(ids: number[], owner: string): Promise<void>;
  /** The rows of the sink this process holds keep their leases for `leaseMs` more (a heartbeat while it works on them). */
  /** Renews the leases of `owner`'s rows of the sink; returns their ids (a row missing is another's). */
  renewClaims(renewal: { sink: string; owner: string; now: number; leaseMs: number }): Promise<number[]>;
  makeDue(sink: string, now: number): Promise<void>;
  /** Clears every lease, or only `owner`'s; returns how many. */
  releaseAll(owner?: string): Promise<number>;
  /** This replica serves these sinks (a heartbeat; see `setAsideUnserved`). */
  announceServed(sinks: string[], now: number): Promise<void>;
  setAsideUnserved(options: UnservedWork): Promise<UnservedSetAside>;
  countBySink(kind: 'pending' | 'deadLetters'): Promise<Record<string, number>>;
  /**
   * Rows for log entries whose first attempts did not simply deliver them (or that wait behind their
   * box's). The log is read without the events that have a row of the sink, so a row found now was
   * written since the read (a resend, a replay): it stands, and the entry's outcome is not written.
   * Rows are written only while `heldAs` still holds the entries' partition under its epoch (a
   * holder that stalled or stopped writes nothing once another took it). Returns how many rows were written.
   */
  addExceptions(rows: NewException[], heldAs: HeldAs): Promise<number>;
  /** Of these boxes, those with pending work for the sink (per-box order holds their later events back). */
  pendingBoxes(sink: string, boxIds: string[]): Promise<string[]>;
}

/** The log partition a lane's writes are made for, as it holds it: the epoch of its take. */
export interface HeldAs {
  part: number;
  owner: string;
  epoch: number;
}

/** An outbox row for an event read from the log: how its attempts ended, kept as any row is. */
export interface NewException {
  deliveryId: string;
  sink: string;
  status: 'pending' | 'delivered' | 'dead';
  attempts: number;
  /** Epoch ms: when a pending row is due. */
  nextAttemptAt: number;
  lastError: string | null;
  boxId: string | null;
  traceparent: string | null;
  now: number;
}

/** What a pass over unserved sinks did: rows set aside by sink, and each sink whose work could not be (the others went on). */
export interface UnservedSetAside {
  setAside: Record<string, number>;
  failed: { sink: string; step: string; message: string }[];
  /** Some sink's work was left at the step limit: call again for the rest. */
  more: boolean;
}

export interface UnservedWork {
  /** The sinks this replica serves: work of any other sink may be set aside. */
  configured: string[];
  /** How long a sink may go without a replica that serves it before its work is set aside; 0: at once (the only process). */
  graceMs: number;
  now: number;
  /** Rows (and log entries) set aside per transaction; `SET_ASIDE_BATCH` unless given. */
  batchSize?: number;
  /** Steps per sink and kind of work in this call, so a caller can stop between calls; no limit unless given. */
  maxSteps?: number;
}

/** Pending rows, as a literal: the partial indexes of pending work serve it on both engines. */
const PENDING = sql<boolean>`status = 'pending'`;

/**
 * Every write is one statement, atomic by itself: on SQLite the connection is shared with the
 * group-commit writer, so no Kysely transaction may be opened on it.
 */
export function createOutboxClaims(database: Database): OutboxClaims {
  const db: Kysely<Schema> = database.kysely;
  const postgres = database.dialect === 'postgres';
  /** Leases are compared with one clock that every replica shares (the database's on PostgreSQL). */
  const leaseNow = leaseClock(database);
  const leaseFree = (now: number) => sql<boolean>`(lease_until IS NULL OR lease_until <= ${leaseNow(now)})`;

  /** A scrape, the console and the admin API share one count of the log, kept between calls. */
  const countBacklogs = createBacklogCount(database);

  /** Some replica announced the sink within the grace (a sink never announced starts its grace now). */
  const servedWithinGrace = async (sink: string, graceMs: number, now: number): Promise<boolean> => {
    await db
      .insertInto('sink_servers')
      .values({ sink, served_at: leaseNow(now) })
      .onConflict((oc) => oc.column('sink').doNothing())
      .execute();
    const served = await db
      .selectFrom('sink_servers')
      .select('sink')
      .where('sink', '=', sink)
      .where('served_at', '>', sql<number>`${leaseNow(now)} - ${graceMs}`)
      .executeTakeFirst();
    return served !== undefined;
  };

  /** A sink's pending rows no lease holds become set aside, `batchSize` rows a statement (through the partial index of pending rows). */
  const setAsidePendingRows = (sink: string, now: number, batchSize: number, maxSteps: number): Promise<StepsRun> =>
    inSteps(
      sink,
      'its pending rows',
      async () => {
        const rows = await db
          .updateTable('outbox')
          .set({ status: 'set_aside', last_error: SINK_NOT_CONFIGURED, updated_at: now, ...LEASE_CLEARED })
          .where('id', 'in', (eb) =>
            eb.selectFrom('outbox').select('id').where(PENDING).where('sink', '=', sink).where(leaseFree(now)).limit(batchSize),
          )
          .where(PENDING)
          .executeTakeFirst();
        const changed = Number(rows.numUpdatedRows);
        return { changed, done: changed < batchSize };
      },
      maxSteps,
    );

  return {
    /**
     * Leases up to `limit` due rows of one sink, in due order (which is arrival order for fresh work).
     * On PostgreSQL, SKIP LOCKED lets replicas claim side by side; a lease that is not settled
     * (a dead process) expires and the row becomes due again. The lease needs no fsync of its own.
     */
    async claim({ sink, owner, now, leaseMs, limit, ordered = false }: Claim): Promise<ClaimedRow[]> {
      const due = db
        .selectFrom('outbox')
        .select('id')
        .where('status', '=', 'pending')
        .where('sink', '=', sink)
        .where('next_attempt_at', '<=', now)
        .where(leaseFree(now))
        .$if(ordered, (q) =>
          q.where(({ not, exists, selectFrom }) =>
            not(
              exists(
                selectFrom('outbox as earlier')
                  .select('earlier.id')
                  .whereRef('earlier.sink', '=', 'outbox.sink')
                  .whereRef('earlier.box_id', '=', 'outbox.box_id')
                  .where('earlier.status', '=', 'pending')
                  .whereRef('earlier.id', '<', 'outbox.id'),
              ),
            ),
          ),
        )
        .orderBy('next_attempt_at')
        .orderBy('id')
        .limit(limit)
        .$if(postgres, (q) => q.forUpdate().skipLocked());
      const rows = await executeUnsynced(
        database,
        db
          .updateTable('outbox')
          .set({ lease_owner: owner, lease_until: sql<number>`${leaseNow(now)} + ${leaseMs}` })
          .where('id', 'in', due)
          .returning(['id', 'delivery_id', 'sink', 'attempts', 'next_attempt_at', 'box_id', 'trace_parent', 'version']),
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
        boxId: r.box_id,
        traceparent: r.trace_parent,
        payload: events.get(r.delivery_id)?.payload ?? null,
        origin: events.get(r.delivery_id)?.origin ?? null,
        version: r.version,
      }));
    },

    /**
     * When a lane should look again: the earliest time a row of this sink that `owner` does not
     * hold becomes claimable (its due time, or the end of another process's lease). Null: nothing.
     * A lease's end is by the lease clock: a replica whose own clock is off wakes early or late, and
     * the poll covers the rest.
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
     * Delivered rows keep their attempts, last error and delivery time (`updated_at`), and leave the
     * partial indexes of pending work. One statement for the acks of one outcome that arrive
     * together (most are a first attempt without error). An update lost to a power failure only
     * sends the event again, so it needs no fsync of its own.
     */
    async markDelivered(rows: Delivered[]): Promise<number[]> {
      const groups = new Map<string, Delivered[]>();
      for (const row of rows) {
        const key = JSON.stringify([row.attempts, row.lastError, row.now, row.version]);
        groups.set(key, [...(groups.get(key) ?? []), row]);
      }
      const marked = new Set<number>();
      for (const group of groups.values()) {
        const { attempts, lastError, now, version } = group[0] as Delivered;
        const updated = await executeUnsynced(
          database,
          db
            .updateTable('outbox')
            .set((eb) => ({
              status: 'delivered',
              attempts,
              // A delivery on a first try of this claim keeps the error of an earlier scheduled attempt.
              last_error: lastError ?? eb.ref('last_error'),
              updated_at: now,
              ...LEASE_CLEARED,
            }))
            .where('id', 'in', group.map((row) => row.id))
            .where('status', '=', 'pending')
            .where('version', '=', version)
            .returning('id'),
        );
        for (const { id } of updated) marked.add(id);
      }
      return rows.filter((row) => !marked.has(row.id)).map((row) => row.id);
    },

    /** Another attempt later; only while the lease is still ours (otherwise another process has it). */
    async scheduleRetry({ id, owner, version, attempts, lastError, now }: Settled, nextAttemptAt: number): Promise<boolean> {
      const result = await db
        .updateTable('outbox')
        .set({ attempts, next_attempt_at: nextAttemptAt, last_error: lastError, updated_at: now, ...LEASE_CLEARED })
        .where('id', '=', id)
        .where('status', '=', 'pending')
        .where('lease_owner', '=', owner)
        .where('version', '=', version)
        .executeTakeFirst();
      return result.numUpdatedRows > 0n;
    },

    /** A dead letter: kept with its attempts and last error; `updated_at` is when it failed. */
    async markDead({ id, owner, version, attempts, lastError, now }: Settled): Promise<boolean> {
      const result = await db
        .updateTable('outbox')
        .set({ status: 'dead', attempts, last_error: lastError, updated_at: now, ...LEASE_CLEARED })
        .where('id', '=', id)
        .where('status', '=', 'pending')
        .where('lease_owner', '=', owner)
        .where('version', '=', version)
        .executeTakeFirst();
      return result.numUpdatedRows > 0n;
    },

    /** Gives rows back untouched (a stopping process), so they are due again at once. */
    async release(ids: number[], owner: string): Promise<void> {
      if (ids.length === 0) return;
      await db
        .updateTable('outbox')
        .set(LEASE_CLEARED)
        .where('id', 'in', ids)
        .where('status', '=', 'pending')
        .where('lease_owner', '=', owner)
        .execute();
    },

    async renewClaims({ sink, owner, now, leaseMs }: { sink: string; owner: string; now: number; leaseMs: number }): Promise<number[]> {
      const renewed = await executeUnsynced(
        database,
        db
          .updateTable('outbox')
          .set({ lease_until: sql<number>`${leaseNow(now)} + ${leaseMs}` })
          .where('status', '=', 'pending')
          .where('sink', '=', sink)
          .where('lease_owner', '=', owner)
          .returning('id'),
      );
      return renewed.map((row) => Number(row.id));
    },

    /**
     * A sink resumed or recovered: its pending work, backed off while it failed, is due now. Rows
     * another process holds are its to settle.
     */
    async makeDue(sink: string, now: number): Promise<void> {
      await db
        .updateTable('outbox')
        .set({ next_attempt_at: now })
        .where('status', '=', 'pending')
        .where('sink', '=', sink)
        .where('next_attempt_at', '>', now)
        .where(leaseFree(now))
        .execute();
    },

    /**
     * Clears every lease of rows and log partitions (SQLite, where only one process serves the file,
     * so any lease is stale at start), or those of an owner known to be gone (a fan-out worker that died).
     */
    async releaseAll(owner?: string): Promise<number> {
      const result = await db
        .updateTable('outbox')
        .set(LEASE_CLEARED)
        .where('status', '=', 'pending')
        .where('lease_owner', owner === undefined ? 'is not' : '=', owner ?? null)
        .executeTakeFirst();
      const parts = await db
        .updateTable('log_cursors')
        .set(LEASE_CLEARED)
        .where('lease_owner', owner === undefined ? 'is not' : '=', owner ?? null)
        .executeTakeFirst();
      // Gone readers no longer count toward the share of the live ones.
      await db
        .deleteFrom('log_readers')
        .$if(owner !== undefined, (q) => q.where('owner', '=', owner as string))
        .execute();
      return Number(result.numUpdatedRows) + Number(parts.numUpdatedRows);
    },

    async announceServed(sinks: string[], now: number): Promise<void> {
      if (sinks.length === 0) return;
      await db
        .insertInto('sink_servers')
        .values(sinks.map((sink) => ({ sink, served_at: leaseNow(now) })))
        .onConflict((oc) => oc.column('sink').doUpdateSet((eb) => ({ served_at: eb.ref('excluded.served_at') })))
        .execute();
    },

    /**
     * Pending work of a sink this replica does not serve is left alone while some replica serves it
     * (a rolling update: a peer with another hook list still sends it), and set aside (listed as dead
     * letters) once none has announced it for `graceMs`; for a sink never announced, the grace starts
     * when its work is first found here. Rows a live lease holds are never touched. Each sink's work
     * goes in steps of a bounded number of rows, each step its own short transaction; a sink whose
     * step fails is told in `failed` (what was set aside before stays so), and the others go on.
     */
    async setAsideUnserved({ configured, graceMs, now, batchSize = SET_ASIDE_BATCH, maxSteps = Infinity }: UnservedWork): Promise<UnservedSetAside> {
      const pendingSinks = await db
        .selectFrom('outbox')
        .select('sink')
        .distinct()
        .where('status', '=', 'pending')
        .$if(configured.length > 0, (q) => q.where('sink', 'not in', configured))
        .execute();
      const loggedSinks = await db
        .selectFrom('log_cursors')
        .select('sink')
        .distinct()
        .$if(configured.length > 0, (q) => q.where('sink', 'not in', configured))
        .execute();
      const result: UnservedSetAside = { setAside: {}, failed: [], more: false };
      for (const sink of new Set([...pendingSinks, ...loggedSinks].map((row) => row.sink))) {
        try {
          if (graceMs > 0 && (await servedWithinGrace(sink, graceMs, now))) continue;
          // Counted step by step: what a step set aside stays so when a later one fails.
          const count = ({ changed, done }: StepsRun) => {
            if (changed > 0) result.setAside[sink] = (result.setAside[sink] ?? 0) + changed;
            if (!done) result.more = true;
          };
          count(await setAsidePendingRows(sink, now, batchSize, maxSteps));
          count(await setAsideLog(database, sink, now, batchSize, maxSteps));
        } catch (error) {
          const failure = error instanceof SetAsideError ? error : new SetAsideError(sink, 'the grace of its last server', error);
          result.failed.push({ sink, step: failure.step, message: failure.message });
        }
      }
      return result;
    },

    /**
     * Pending work (the outbox's pending rows and the log past each sink's cursors), or dead letters
     * (set-aside work included), by sink. The log's backlogs are followed from the last call
     * (createBacklogCount), in slices of the log index: never one long stall.
     */
    async countBySink(kind: 'pending' | 'deadLetters'): Promise<Record<string, number>> {
      const rows = await db
        .selectFrom('outbox')
        .select(['sink', (eb) => eb.fn.countAll<number>().as('count')])
        .where(kind === 'pending' ? sql<boolean>`status = 'pending'` : DEAD_LETTER)
        .groupBy('sink')
        .execute();
      const counts = Object.fromEntries(rows.map((r) => [r.sink, Number(r.count)]));
      if (kind === 'pending') {
        for (const { sink, backlog } of await countBacklogs()) if (backlog > 0) counts[sink] = (counts[sink] ?? 0) + backlog;
      }
      return counts;
    },

    async addExceptions(rows: NewException[], { part, owner, epoch }: HeldAs): Promise<number> {
      let written = 0;
      for (const row of rows) {
        const result = await db
          .insertInto('outbox')
          .columns(['delivery_id', 'sink', 'status', 'attempts', 'next_attempt_at', 'last_error', 'created_at', 'updated_at', 'box_id', 'trace_parent'])
          .expression(
            db
              .selectFrom('deliveries as d')
              .select([
                'd.id',
                sql.val(row.sink).as('sink'),
                sql.val(row.status).as('status'),
                sql.val(row.attempts).as('attempts'),
                sql.val(row.nextAttemptAt).as('next_attempt_at'),
                sql.val(row.lastError).as('last_error'),
                sql.val(row.now).as('created_at'),
                sql.val(row.now).as('updated_at'),
                sql.val(row.boxId).as('box_id'),
                sql.val(row.traceparent).as('trace_parent'),
              ])
              .where('d.id', '=', row.deliveryId)
              .where(({ not, exists, selectFrom }) =>
                not(exists(selectFrom('outbox as o').select('o.id').whereRef('o.delivery_id', '=', 'd.id').where('o.sink', '=', row.sink))),
              )
              // FOR SHARE: a take of the partition (FOR UPDATE) waits for this write or is seen by it.
              .where(({ exists, selectFrom }) =>
                exists(
                  selectFrom('log_cursors as c')
                    .select('c.part')
                    .where('c.sink', '=', row.sink)
                    .where('c.part', '=', part)
                    .where('c.lease_owner', '=', owner)
                    .where('c.epoch', '=', epoch)
                    .$if(postgres, (q) => q.forShare()),
                ),
              ),
          )
          // A live row written meanwhile (a resend, another replica's lane) stands.
          .onConflict((oc) => oc.doNothing())
          .executeTakeFirst();
        written += Number(result.numInsertedOrUpdatedRows ?? 0n);
      }
      return written;
    },

    async pendingBoxes(sink: string, boxIds: string[]): Promise<string[]> {
      if (boxIds.length === 0) return [];
      const rows = await db
        .selectFrom('outbox')
        .select('box_id')
        .distinct()
        .where(sql<boolean>`status = 'pending'`)
        .where('sink', '=', sink)
        .where('box_id', 'in', boxIds)
        .execute();
      return rows.map((row) => row.box_id as string);
    },
  };
}
