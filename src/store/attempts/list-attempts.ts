import { sql, type Kysely } from 'kysely';
import type { Schema } from '../schema.js';
import { KEPT_PER_EVENT_AND_SINK, attemptColumns, toAttempt, type Attempt } from './attempt-rows.js';

/** Where a page of attempts ended: the last one's start time and id. */
export interface AttemptPosition {
  at: number;
  id: number;
}

/**
 * An event's attempts, newest first (by start, then by when written), after `before`; only the last
 * 50 of each sink (older ones wait for the retention prune to go).
 */
export async function listAttempts(
  db: Kysely<Schema>,
  query: { eventId: string; sink?: string | undefined; before?: AttemptPosition | undefined; limit: number },
): Promise<{ position: AttemptPosition; attempt: Attempt }[]> {
  const { eventId, sink, before } = query;
  const rows = await db
    .selectFrom('attempts as a')
    .select(attemptColumns.map((column) => `a.${column}` as const))
    .where('a.event_id', '=', eventId)
    .$if(sink !== undefined, (q) => q.where('a.sink', '=', sink as string))
    .$if(before !== undefined, (q) =>
      q.where((eb) => eb.or([eb('a.at', '<', before!.at), eb.and([eb('a.at', '=', before!.at), eb('a.id', '<', before!.id)])])),
    )
    .where(
      'a.n',
      '>',
      sql<number>`(SELECT max(newest.n) - ${KEPT_PER_EVENT_AND_SINK} FROM attempts newest WHERE newest.event_id = a.event_id AND newest.sink = a.sink)`,
    )
    .orderBy('a.at', 'desc')
    .orderBy('a.id', 'desc')
    .limit(query.limit)
    .execute();
  return rows.map((row) => ({ position: { at: Number(row.at), id: Number(row.id) }, attempt: toAttempt(row) }));
}
