import { sql } from 'kysely';
import { DAY_MS } from '../../clock.js';
import type { Database } from '../engines/database.js';
import { executeUnsynced } from '../engines/unsynced.js';
import { DELIVERY_WORK_PENDING, boxWorkPending } from './pending-work.js';
import { pruneAttempts } from '../attempts/prune-attempts.js';
import { pruneAttemptMinutes } from './prune-attempt-minutes.js';


export interface PruneOptions {
  /** Epoch ms. */
  now: number;
  retentionDays: number;
  /**
   * Rows per DELETE: small, so no statement holds the (SQLite: synchronous) connection for long. Each
   * row costs a random page of the id and box indexes (the batch size's measure: docs/performance.md).
   */
  batchSize?: number;
  /** Stops between batches (shutdown); what was removed so far stays removed. */
  signal?: AbortSignal | undefined;
}

export interface PruneResult {
  /** Epoch ms: what was received (or last seen) before this was removed. */
  cutoff: number;
  deliveries: number;
  boxes: number;
  /**
   * Signing secrets past their expiry (those of a finished rotation). Not `secrets`: the logger
   * redacts that path, and a count is no secret.
   */
  expiredSecrets: number;
  /** Audit entries (contract section 15). */
  audit: number;
}

/**
 * A box retention may forget: not in `error` (its alert must not clear while nobody acted: a newer
 * event, a reconcile run or an operator's forget changes it), and no work pending for its events.
 */
const forgettable = (box: 'b' | 'boxes') =>
  sql<boolean>`(${sql.ref(`${box}.state`)} IS NULL OR ${sql.ref(`${box}.state`)} <> 'error') AND NOT ${boxWorkPending(`${box}.id`)}`;

const pause = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/**
 * The least rest between two batches, so that a prune under load adds a bounded stream of writes
 * (on SQLite a statement blocks the event loop and the group-commit writer alike).
 */
const MIN_PAUSE_MS = 50;

/**
 * Runs bounded batches of deletes until one says no more is left. After each batch the connection
 * is left to requests for at least as long as the batch held it.
 */
async function deleteInBatches(deleteBatch: () => Promise<{ removed: number; more: boolean }>, signal: AbortSignal | undefined): Promise<number> {
  let total = 0;
  while (!signal?.aborted) {
    const started = performance.now();
    const { removed, more } = await deleteBatch();
    total += removed;
    if (!more) break;
    await pause(Math.max(MIN_PAUSE_MS, performance.now() - started));
  }
  return total;
}

/** Boxes read per statement of the boxes' pass, in batches of this many deletes. */
const BOX_WINDOW_BATCHES = 100;

/**
 * Retention: removes deliveries older than `retentionDays` with their settled outbox rows
 * (delivered, discarded), boxes not heard of for as long (unless in `error`, or with work pending),
 * audit entries, delivery counts and cursor marks as old, and signing secrets past their expiry. A
 * delivery stays while work for it is pending (an outbox row pending, a dead letter or set aside, or
 * a sink it was routed to has not read it from the log), so retention never loses undelivered events. Removing a delivery ends its dedup protection: the
 * dedup window is the retention period. Every statement stands alone (no transaction), as the
 * SQLite connection is shared with the group-commit writer; each commits without an fsync of its own
 * (a delete lost to a power failure is only done again on the next run), as an fsync per batch
 * would stall the receive path. The pages they dirty are copied into the database file by the
 * background checkpointer (src/store/engines/checkpointer.ts), not on this connection.
 */
export async function pruneExpired(database: Database, options: PruneOptions): Promise<PruneResult> {
  const { kysely } = database;
  const batchSize = options.batchSize ?? 50;
  const cutoff = options.now - options.retentionDays * DAY_MS;
  const deliveries = await deleteInBatches(
    async () => {
      // A batch of expired deliveries whose fan-out is all settled; its rows go first, then the
      // deliveries that have none left (a replay may have queued one meanwhile: that one stays).
      const expired = await kysely
        .selectFrom('deliveries as d')
        .select('d.id')
        .where('d.received_at', '<', cutoff)
        .where(sql<boolean>`NOT ${DELIVERY_WORK_PENDING}`)
        .limit(batchSize)
        .execute();
      if (expired.length === 0) return { removed: 0, more: false };
      const ids = expired.map((d) => d.id);
      await executeUnsynced(database, kysely.deleteFrom('outbox').where('delivery_id', 'in', ids).where('status', 'in', ['delivered', 'discarded']));
      const removed = await executeUnsynced(
        database,
        kysely
          .deleteFrom('deliveries')
          .where('id', 'in', ids)
          .where(({ not, exists, selectFrom }) => not(exists(selectFrom('outbox').select('outbox.id').whereRef('outbox.delivery_id', '=', 'deliveries.id'))))
          .returning('id'),
      );
      return { removed: removed.length, more: removed.length >= batchSize };
    },
    options.signal,
  );

  // In id order, a window of boxes per statement: last_seen_at has no index (every stored event
  // would move its entry), so a run reads each box once, in bounded steps.
  const window = batchSize * BOX_WINDOW_BATCHES;
  let after: string | undefined;
  const boxes = await deleteInBatches(
    async () => {
      const inWindow = kysely
        .selectFrom('boxes as b')
        .select('b.id')
        .$if(after !== undefined, (q) => q.where('b.id', '>', after!))
        .orderBy('b.id');
      const end = (await inWindow.offset(window - 1).limit(1).executeTakeFirst())?.id;
      const batch = await inWindow
        .$if(end !== undefined, (q) => q.where('b.id', '<=', end!))
        .where('b.last_seen_at', '<', cutoff)
        .where(forgettable('b'))
        .limit(batchSize)
        .execute();
      const full = batch.length === batchSize;
      // A full batch may leave more of its window; otherwise the window is done.
      after = full ? batch[batch.length - 1]!.id : end;
      if (batch.length === 0) return { removed: 0, more: end !== undefined };
      // Checked again: an event or a replay may have come for the box since.
      const removed = await executeUnsynced(
        database,
        kysely
          .deleteFrom('boxes')
          .where('id', 'in', batch.map((box) => box.id))
          .where('last_seen_at', '<', cutoff)
          .where(forgettable('boxes'))
          .returning('id'),
      );
      return { removed: removed.length, more: full || end !== undefined };
    },
    options.signal,
  );

  // Audit entries and the per-minute delivery counts are kept for the same window; a few rows a day each.
  const audit = options.signal?.aborted
    ? 0
    : (await executeUnsynced(database, kysely.deleteFrom('audit').where('at', '<', cutoff).returning('id'))).length;
  if (!options.signal?.aborted) await executeUnsynced(database, kysely.deleteFrom('sink_minutes').where('minute', '<', cutoff));
  await pruneAttempts(database, { cutoff, batchSize, signal: options.signal });
  await pruneAttemptMinutes(database, { cutoff, batchSize, signal: options.signal });
  // When cursors passed positions that retention has removed, and readers long gone.
  if (!options.signal?.aborted) await executeUnsynced(database, kysely.deleteFrom('log_marks').where('at', '<', cutoff));
  if (!options.signal?.aborted) await executeUnsynced(database, kysely.deleteFrom('log_readers').where('seen_at', '<', cutoff));

  // An expired secret verifies nothing any more; kept, it would only be a secret at rest.
  const expiredSecrets = options.signal?.aborted
    ? 0
    : Number((await kysely.deleteFrom('secrets').where('expires_at', '<', options.now).executeTakeFirstOrThrow()).numDeletedRows);

  return { cutoff, deliveries, boxes, expiredSecrets, audit };
}

export function describePrune(result: PruneResult): string {
  return (
    `removed deliveries: ${result.deliveries}, boxes: ${result.boxes} (older than ${new Date(result.cutoff).toISOString()}), ` +
    `expired secrets: ${result.expiredSecrets}, audit entries: ${result.audit}`
  );
}
