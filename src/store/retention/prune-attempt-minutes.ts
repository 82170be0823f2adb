import { sql } from 'kysely';
import type { Database } from '../engines/database.js';
import { executeUnsynced } from '../engines/unsynced.js';

/** The per-minute sums of attempts (`attempt_minutes`, `attempt_statuses`): keyed by sink, then minute. */
const TABLES = ['attempt_minutes', 'attempt_statuses'] as const;

/**
 * Retention of the attempts' per-minute sums: the minutes that started before `cutoff`, kept as long
 * as the attempts. Sink by sink (found by a walk of index seeks), each delete a range of the primary
 * key ending at the `batchSize`th expired row, so no statement holds the connection for long.
 * Answers the rows removed.
 */
export async function pruneAttemptMinutes(
  database: Database,
  { cutoff, batchSize, signal }: { cutoff: number; batchSize: number; signal?: AbortSignal | undefined },
): Promise<number> {
  const db = database.kysely;
  let removed = 0;
  for (const table of TABLES) {
    const { rows: sinks } = await sql<{ sink: string }>`
      WITH RECURSIVE s(sink) AS (
        SELECT min(sink) FROM ${sql.table(table)}
        UNION ALL SELECT (SELECT min(sink) FROM ${sql.table(table)} WHERE sink > s.sink) FROM s WHERE s.sink IS NOT NULL
      )
      SELECT sink FROM s WHERE sink IS NOT NULL`.execute(db);
    for (const { sink } of sinks) {
      for (;;) {
        if (signal?.aborted) return removed;
        const expired = db.selectFrom(table).where('sink', '=', sink).where('minute', '<', cutoff);
        const last = await expired.select('minute').orderBy('minute').offset(batchSize - 1).limit(1).executeTakeFirst();
        const batch = await executeUnsynced(
          database,
          db
            .deleteFrom(table)
            .where('sink', '=', sink)
            .where('minute', last === undefined ? '<' : '<=', last === undefined ? cutoff : Number(last.minute))
            .returning('sink'),
        );
        removed += batch.length;
        if (last === undefined) break;
      }
    }
  }
  return removed;
}
