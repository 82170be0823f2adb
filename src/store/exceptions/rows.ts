import { sql, type ExpressionBuilder, type Kysely, type RawBuilder } from 'kysely';
import type { Database } from '../engines/database.js';
import type { StoredEvent } from '../../events/types.js';
import type { OutboxStatus, Schema } from '../schema.js';

/**
 * The outbox rows (the fan-out's exceptions: retries, dead letters, held and replayed work) as the
 * store and the dispatcher pass them, and the SQL pieces every query of them shares.
 */

/** A row the dispatcher holds a lease on, with the stored event (null when pruned meanwhile). */
export interface ClaimedRow {
  id: number;
  deliveryId: string;
  sink: string;
  attempts: number;
  boxId: string | null;
  /** Of the span that stored the work; its attempts join that trace. */
  traceparent: string | null;
  payload: string | null;
  origin: string | null;
  /** The row's version when claimed: its outcome is written only while the row still has it. */
  version: number;
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
  /** Per-box ordering: a row waits while an earlier row of its box is pending (due later, or leased) for the sink. */
  ordered?: boolean;
}

/** A row its sink acknowledged: its attempts (all of them), the last failure before (if any), and when. */
export interface Delivered {
  id: number;
  /** As claimed: a row reopened since (a resend) is not marked, and is sent again. */
  version: number;
  attempts: number;
  /** Null keeps the row's last error, from an earlier scheduled attempt. */
  lastError: string | null;
  now: number;
}

/** The outcome of a row's attempts, written back by the process that holds its lease. */
export interface Settled {
  id: number;
  owner: string;
  /** As claimed: a row reopened since (a resend) is left pending, and is sent again. */
  version: number;
  attempts: number;
  lastError: string;
  now: number;
}

export interface Replay {
  /** Epoch ms: deliveries received at or after this. */
  since: number;
  /** Epoch ms of the request: deliveries received after it are not replayed. */
  now: number;
  /**
   * The receiver's router (event patterns and hook filters), for deliveries stored before their
   * routing was (migration 012).
   */
  sinksFor: (type: string, event?: StoredEvent) => string[];
  /** The configured sinks: a sink routed to once and configured no more gets nothing. */
  configured: readonly string[];
  /** Only this sink (of those each event was routed to). */
  sink?: string | undefined;
}

export const SINK_NOT_CONFIGURED = 'sink not configured';

/**
 * Dead letters: rows a sink gave up on, and work set aside for a sink no replica serves. Written as
 * literals, as the partial index `outbox_dead_letters` is, so SQLite's planner can use it.
 */
export const DEAD_LETTER = sql<boolean>`status IN ('dead', 'set_aside')`;

/** A fan-out row no process holds: set with every write that settles, releases or sets a row aside. */
export const LEASE_CLEARED = { lease_owner: null, lease_until: null } as const;

/**
 * A live row: at most one per event and sink (the unique index `outbox_live`, whose predicate this
 * is, written the same so both engines take it as the conflict target).
 */
export const LIVE = sql<boolean>`status IN ('pending', 'dead', 'set_aside')`;

/**
 * A live row sent again (a resend, a replay, a dead-letter retry): pending, due at `now`, with a
 * fresh attempt budget and a new version, so an attempt of it already under way does not settle it.
 */
export const reopened = (now: number) =>
  ({ status: 'pending', attempts: 0, next_attempt_at: now, updated_at: now, ...LEASE_CLEARED, version: sql<number>`outbox.version + 1` }) as const;

/** The columns of new pending rows for deliveries (aliased `d`) to `sink`, due at `now`. */
const pendingRowsOf = (db: Kysely<Schema>, sink: string, now: number) =>
  db
    .selectFrom('deliveries as d')
    .select([
      'd.id',
      sql.val(sink).as('sink'),
      sql.val('pending').as('status'),
      sql.val(0).as('attempts'),
      sql.val(now).as('next_attempt_at'),
      sql.val(now).as('created_at'),
      sql.val(now).as('updated_at'),
      'd.box_id',
    ]);

/**
 * The stored deliveries `choose` picks sent to `sink` again with a fresh attempt budget, due at
 * `now` (a replay's, a resend's): a new pending row each, or, where the event already has a live row
 * for the sink, that row reopened. With `pendingStands`, a pending row is left as it is.
 */
export function sendAgain(
  db: Kysely<Schema>,
  sink: string,
  now: number,
  choose: (deliveries: ReturnType<typeof pendingRowsOf>) => ReturnType<typeof pendingRowsOf>,
  { pendingStands }: { pendingStands: boolean },
) {
  return db
    .insertInto('outbox')
    .columns(['delivery_id', 'sink', 'status', 'attempts', 'next_attempt_at', 'created_at', 'updated_at', 'box_id'])
    .expression(choose(pendingRowsOf(db, sink, now)))
    .onConflict((oc) => {
      const reopen = oc.columns(['delivery_id', 'sink']).where(LIVE).doUpdateSet(reopened(now));
      return pendingStands ? reopen.where('outbox.status', '!=', 'pending') : reopen;
    });
}

/**
 * The delivery `d` has no outbox row of `sink` (of those `which` picks): on PostgreSQL a probe per
 * delivery on its own rows (`outbox_delivery`); as an anti-join, the planner (with the outbox's
 * statistics behind a replay's growth) chose a scan of the sink's whole outbox.
 */
export function noRowOf(database: Database, sink: string, which: RawBuilder<boolean> = sql<boolean>`TRUE`) {
  return ({ not, exists, selectFrom }: ExpressionBuilder<Schema & { d: Schema['deliveries'] }, 'd'>) =>
    not(
      exists(
        selectFrom('outbox as o')
          .select('o.id')
          .whereRef('o.delivery_id', '=', 'd.id')
          .where('o.sink', '=', sink)
          .where(which)
          .$if(database.dialect === 'postgres', (q) => q.offset(0)),
      ),
    );
}
