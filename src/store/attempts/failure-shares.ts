import { sql, type Kysely } from 'kysely';
import type { Schema } from '../schema.js';

/** A sink's attempts in a window, and how many of them failed (retried or dead-lettered). */
export interface AttemptShare {
  attempts: number;
  failed: number;
}

/**
 * Each of `sinks`' attempts in the minutes that start at or after `since`, from the per-minute sums
 * (every replica's attempts, whatever `BOXRELAY_ATTEMPTS` keeps): one range of the sums' key per
 * sink, never the attempts themselves. A sink without attempts there is missing.
 */
export async function attemptShares(db: Kysely<Schema>, { sinks, since }: { sinks: readonly string[]; since: number }): Promise<Map<string, AttemptShare>> {
  if (sinks.length === 0) return new Map();
  const sum = (column: 'delivered' | 'retried' | 'dead_lettered') => sql<number>`sum(${sql.ref(column)})`.as(column);
  const rows = await db
    .selectFrom('attempt_minutes')
    .select(['sink', sum('delivered'), sum('retried'), sum('dead_lettered')])
    .where('sink', 'in', sinks)
    .where('minute', '>=', since)
    .groupBy('sink')
    .execute();
  // PostgreSQL answers a sum of bigints as a string.
  return new Map(
    rows.map((row) => {
      const failed = Number(row.retried) + Number(row.dead_lettered);
      return [row.sink, { attempts: Number(row.delivered) + failed, failed }];
    }),
  );
}
