import { DAY_MS } from '../clock.js';
import type { Database } from './database.js';
import { executeUnsynced } from './unsynced.js';

// Until src/sinks/nats.ts imports it from src/clock.ts (its owner switches it), the one DAY_MS is also reachable here.
export { DAY_MS };

export interface PruneOptions {
  /** Epoch ms. */
  now: number;
  retentionDays: number;
  /**
   * Rows per DELETE: small, so no statement holds the (SQLite: synchronous) connection for long. Each
   * row costs a random page of the id and box indexes; 50 kept the receive path's p99 unchanged
   * under load where 100 doubled it (docs/performance.md).
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
}

const pause = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/**
 * The least rest between two batches, so that a prune under load adds a bounded stream of writes
 * (on SQLite a statement blocks the event loop and the group-commit writer alike). A day of
 * deliveries (some 350,000 rows at 4/s) still goes in under 10 minutes.
 */
const MIN_PAUSE_MS = 50;

/**
 * Runs one bounded DELETE until it removes less than a full batch. After each batch the connection
 * is left to requests for at least as long as the batch held it.
 */
async function deleteInBatches(
  deleteBatch: () => Promise<unknown[]>,
  batchSize: number,
  signal: AbortSignal | undefined,
): Promise<number> {
  let total = 0;
  while (!signal?.aborted) {
    const started = performance.now();
    const removed = (await deleteBatch()).length;
    total += removed;
    if (removed < batchSize) break;
    await pause(Math.max(MIN_PAUSE_MS, performance.now() - started));
  }
  return total;
}

/**
 * Retention: removes deliveries older than `retentionDays`, boxes not heard of for as long, and
 * signing secrets past their expiry. Delivered fan-out rows are deleted when delivered. A
 * delivery stays while any of its outbox rows is left, pending or dead (work not yet handled), so
 * retention never loses undelivered events. Removing a delivery ends its dedup protection: the
 * dedup window is the retention period. Every statement stands alone (no transaction), as the
 * SQLite connection is shared with the group-commit writer; each commits without an fsync of its own
 * (a delete lost to a power failure is only done again on the next run), as an fsync per batch
 * would stall the receive path. The pages they dirty are copied into the database file by the
 * background checkpointer (src/store/checkpointer.ts), not on this connection.
 */
export async function pruneExpired(database: Database, options: PruneOptions): Promise<PruneResult> {
  const { kysely } = database;
  const batchSize = options.batchSize ?? 50;
  const cutoff = options.now - options.retentionDays * DAY_MS;
  const deliveries = await deleteInBatches(
    () =>
      executeUnsynced(
        database,
        kysely
          .deleteFrom('deliveries')
          .where('id', 'in', (eb) =>
            eb
              .selectFrom('deliveries as d')
              .select('d.id')
              .where('d.received_at', '<', cutoff)
              .where(({ not, exists, selectFrom }) =>
                not(exists(selectFrom('outbox').select('outbox.id').whereRef('outbox.delivery_id', '=', 'd.id'))),
              )
              .limit(batchSize),
          )
          .returning('id'),
      ),
    batchSize,
    options.signal,
  );

  const boxes = await deleteInBatches(
    () =>
      executeUnsynced(
        database,
        kysely
          .deleteFrom('boxes')
          .where('id', 'in', (eb) => eb.selectFrom('boxes').select('id').where('last_seen_at', '<', cutoff).limit(batchSize))
          .returning('id'),
      ),
    batchSize,
    options.signal,
  );

  // An expired secret verifies nothing any more; kept, it would only be a secret at rest.
  const expiredSecrets = options.signal?.aborted
    ? 0
    : Number((await kysely.deleteFrom('secrets').where('expires_at', '<', options.now).executeTakeFirstOrThrow()).numDeletedRows);

  return { cutoff, deliveries, boxes, expiredSecrets };
}

export function describePrune(result: PruneResult): string {
  return (
    `removed deliveries: ${result.deliveries}, boxes: ${result.boxes} (older than ${new Date(result.cutoff).toISOString()}), ` +
    `expired secrets: ${result.expiredSecrets}`
  );
}
