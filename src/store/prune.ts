import type { Kysely } from 'kysely';
import type { Schema } from './schema.js';

export const DAY_MS = 86_400_000;

export interface PruneOptions {
  /** Epoch ms. */
  now: number;
  retentionDays: number;
  /** Rows per DELETE: small, so no statement holds the (SQLite: synchronous) connection for long. */
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

const nextTurn = () => new Promise<void>((resolve) => setImmediate(resolve));

/** Runs one bounded DELETE until it removes less than a full batch, letting requests in between. */
async function deleteInBatches(
  deleteBatch: () => Promise<{ numDeletedRows: bigint }>,
  batchSize: number,
  signal: AbortSignal | undefined,
): Promise<number> {
  let total = 0;
  while (!signal?.aborted) {
    const removed = Number((await deleteBatch()).numDeletedRows);
    total += removed;
    if (removed < batchSize) break;
    await nextTurn();
  }
  return total;
}

/**
 * Retention: removes deliveries older than `retentionDays`, boxes not heard of for as long, and
 * signing secrets past their expiry. Delivered fan-out rows are deleted when delivered. A
 * delivery stays while any of its outbox rows is left, pending or dead (work not yet handled), so
 * retention never loses undelivered events. Removing a delivery ends its dedup protection: the
 * dedup window is the retention period. Every statement stands alone (no transaction), as the
 * SQLite connection is shared with the group-commit writer.
 */
export async function pruneExpired(kysely: Kysely<Schema>, options: PruneOptions): Promise<PruneResult> {
  const batchSize = options.batchSize ?? 500;
  const cutoff = options.now - options.retentionDays * DAY_MS;
  const deliveries = await deleteInBatches(
    () =>
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
        .executeTakeFirstOrThrow(),
    batchSize,
    options.signal,
  );

  const boxes = await deleteInBatches(
    () =>
      kysely
        .deleteFrom('boxes')
        .where('id', 'in', (eb) => eb.selectFrom('boxes').select('id').where('last_seen_at', '<', cutoff).limit(batchSize))
        .executeTakeFirstOrThrow(),
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
