import { sql } from 'kysely';
import type { Database } from '../engines/database.js';
import { executeUnsynced } from '../engines/unsynced.js';
import { KEPT_PER_EVENT_AND_SINK } from './attempt-rows.js';

/**
 * Retention of attempts: those that started before `cutoff`, and any beyond the newest 50 of their
 * event and sink (successes, written in batches, are not trimmed as they are written). In batches,
 * like the rest of the prune.
 */
export async function pruneAttempts(
  database: Database,
  { cutoff, batchSize, signal }: { cutoff: number; batchSize: number; signal?: AbortSignal | undefined },
): Promise<number> {
  const db = database.kysely;
  let removed = 0;
  // Sink by sink, on the (sink, at) index; the sinks found by a walk of index seeks, not a scan.
  const { rows: sinks } = await sql<{ sink: string }>`
    WITH RECURSIVE s(sink) AS (
      SELECT min(sink) FROM attempts
      UNION ALL SELECT (SELECT min(sink) FROM attempts WHERE sink > s.sink) FROM s WHERE s.sink IS NOT NULL
    )
    SELECT sink FROM s WHERE sink IS NOT NULL`.execute(db);
  for (const { sink } of sinks) {
    for (;;) {
      if (signal?.aborted) return removed;
      const batch = await executeUnsynced(
        database,
        db
          .deleteFrom('attempts')
          .where('id', 'in', (eb) => eb.selectFrom('attempts').select('id').where('sink', '=', sink).where('at', '<', cutoff).limit(batchSize))
          .returning('id'),
      );
      removed += batch.length;
      if (batch.length < batchSize) break;
    }
  }
  if (signal?.aborted) return removed;
  const beyond = await executeUnsynced(
    database,
    db
      .deleteFrom('attempts')
      .where(
        sql<boolean>`n > ${KEPT_PER_EVENT_AND_SINK} AND n <= (SELECT max(newest.n) - ${KEPT_PER_EVENT_AND_SINK} FROM attempts newest WHERE newest.event_id = attempts.event_id AND newest.sink = attempts.sink)`,
      )
      .returning('id'),
  );
  return removed + beyond.length;
}
