import type { Kysely } from 'kysely';
import { MINUTE_MS } from '../state/stats.js';
import type { Schema } from '../schema.js';
import { FAILED_ATTEMPT, attemptColumns, toAttempt, type Attempt } from './attempt-rows.js';
import type { AttemptPosition } from './list-attempts.js';

/** A sink's attempts that failed (retried or dead-lettered), newest first, after `before`. */
export async function failedAttemptsOfSink(
  db: Kysely<Schema>,
  query: { sink: string; before?: AttemptPosition | undefined; limit: number },
): Promise<{ position: AttemptPosition; attempt: Attempt & { eventId: string } }[]> {
  const { before } = query;
  const rows = await db
    .selectFrom('attempts')
    .select([...attemptColumns, 'event_id'])
    .where('sink', '=', query.sink)
    .where(FAILED_ATTEMPT)
    .$if(before !== undefined, (q) => q.where((eb) => eb.or([eb('at', '<', before!.at), eb.and([eb('at', '=', before!.at), eb('id', '<', before!.id)])])))
    .orderBy('at', 'desc')
    .orderBy('id', 'desc')
    .limit(query.limit)
    .execute();
  return rows.map((row) => ({ position: { at: Number(row.at), id: Number(row.id) }, attempt: { eventId: row.event_id, ...toAttempt(row) } }));
}

export interface AttemptMinute {
  /** ISO start of the UTC minute. */
  start: string;
  delivered: number;
  retried: number;
  dead_lettered: number;
}

/** A sink's attempts per UTC minute since `since` (every minute listed, empty ones too), by outcome: its per-minute sums. */
export async function attemptsPerMinute(db: Kysely<Schema>, { sink, since, now }: { sink: string; since: number; now: number }): Promise<AttemptMinute[]> {
  const first = Math.floor(since / MINUTE_MS) * MINUTE_MS;
  const rows = await db
    .selectFrom('attempt_minutes')
    .select(['minute', 'delivered', 'retried', 'dead_lettered'])
    .where('sink', '=', sink)
    .where('minute', '>=', first)
    .execute();
  const minutes = new Map<number, AttemptMinute>();
  for (let minute = first; minute <= now; minute += MINUTE_MS) {
    minutes.set(minute, { start: new Date(minute).toISOString(), delivered: 0, retried: 0, dead_lettered: 0 });
  }
  for (const row of rows) {
    const bucket = minutes.get(Number(row.minute));
    if (bucket) Object.assign(bucket, { delivered: Number(row.delivered), retried: Number(row.retried), dead_lettered: Number(row.dead_lettered) });
  }
  return [...minutes.values()];
}
