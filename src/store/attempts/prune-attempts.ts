import { sql } from 'kysely';
import { deleteSome, inBatches, type BatchContext } from '../retention/batches.js';
import { KEPT_PER_EVENT_AND_SINK } from './attempt-rows.js';

/** A literal, so both engines see that a statement reads only what the partial index `attempts_beyond_kept` holds. */
const BEYOND_KEPT = sql<boolean>`n > ${sql.lit(KEPT_PER_EVENT_AND_SINK)}`;

/**
 * Attempts beyond the newest 50 of their event and sink (successes, written in batches, are not
 * trimmed as they are written). The events and sinks with an attempt numbered past 50 are few and
 * found on the partial index `attempts_beyond_kept`, one after another in key order; each one's
 * oldest are removed in batches on (event_id, sink, n).
 */
export async function trimAttemptsBeyondKept(context: BatchContext): Promise<void> {
  const db = context.database.kysely;
  let after: { event_id: string; sink: string } | undefined;
  await inBatches(context, async (size) => {
    const next = await db
      .selectFrom('attempts')
      .select(['event_id', 'sink'])
      .where(BEYOND_KEPT)
      .$if(after !== undefined, (q) => q.where(sql<boolean>`(event_id, sink) > (${after!.event_id}, ${after!.sink})`))
      .orderBy('event_id')
      .orderBy('sink')
      .limit(1)
      .executeTakeFirst();
    if (next === undefined) return { removed: 0, more: false };
    const removed = await deleteSome(
      context.database,
      {
        table: 'attempts',
        where: sql<boolean>`event_id = ${next.event_id} AND sink = ${next.sink} AND n <= (SELECT max(newest.n) - ${KEPT_PER_EVENT_AND_SINK}
          FROM attempts newest WHERE newest.event_id = ${next.event_id} AND newest.sink = ${next.sink})`,
        orderBy: 'n',
      },
      size,
    );
    // A full batch may leave more of this event and sink; otherwise it is done.
    if (removed < size) after = next;
    return { removed, more: true };
  });
}
