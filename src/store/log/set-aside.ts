import { sql } from 'kysely';
import type { Database } from '../engines/database.js';
import { leaseClock } from '../engines/database-clock.js';
import { atomically } from '../engines/atomically.js';
import { SINK_NOT_CONFIGURED } from '../exceptions/rows.js';
import { logHead } from './cursors.js';
import { routedWithoutRow } from './position.js';

/**
 * The log of a sink no replica serves: its routed deliveries past the cursors of partitions no live
 * lease holds (and without a row of that sink: those are set aside as rows) become set-aside rows,
 * and those cursors move to the head, in one transaction. The free cursors are locked first and
 * only they are moved: a partition taken between two statements keeps its cursor and its entries.
 */
export async function setAsideLog(database: Database, sink: string, now: number): Promise<number> {
  const db = database.kysely;
  const leaseNow = leaseClock(database);
  const lock = database.dialect === 'postgres' ? sql`FOR UPDATE` : sql``;
  return atomically(database, function* () {
    const { rows } = yield sql`SELECT ${logHead(database)} AS seq, ${leaseNow(now)} AS at`.compile(db);
    const [{ seq: head, at }] = rows as [{ seq: number; at: number }];
    const free = (yield sql`SELECT part FROM log_cursors WHERE sink = ${sink} AND seq < ${head}
      AND (lease_until IS NULL OR lease_until <= ${at}) ${lock}`.compile(db)).rows as { part: number }[];
    if (free.length === 0) return 0;
    const parts = sql.join(free.map(({ part }) => part));
    const { changed } = yield sql`INSERT INTO outbox (delivery_id, sink, status, attempts, next_attempt_at, last_error, created_at, updated_at, box_id, trace_parent)
      SELECT d.id, ${sink}, 'set_aside', 0, ${now}, ${SINK_NOT_CONFIGURED}, ${now}, ${now}, d.box_id, d.trace_parent
      FROM log_cursors c JOIN deliveries d ON d.part = c.part
      WHERE c.sink = ${sink} AND c.part IN (${parts}) AND d.seq > c.seq AND d.seq <= ${head} AND ${routedWithoutRow(sink)}
      ORDER BY d.seq`.compile(db);
    yield sql`UPDATE log_cursors SET seq = ${head}, updated_at = ${now} WHERE sink = ${sink} AND part IN (${parts})`.compile(db);
    return changed;
  });
}
