import { sql, type RawBuilder } from 'kysely';
import { routedSql, unnumbered } from '../log/position.js';

/**
 * SQL, for a delivery aliased `d`: work for it is pending. An outbox row of it not delivered or
 * discarded (a retry, a dead letter, set-aside work); not yet given a log position while routed to
 * a sink; or a sink it was routed to whose cursor has not passed it and that has no row of it (the
 * rule of the log's `routedWithoutRow`).
 */
export const DELIVERY_WORK_PENDING = sql<boolean>`(
  EXISTS (SELECT 1 FROM outbox o WHERE o.delivery_id = d.id AND o.status IN ('pending', 'dead', 'set_aside'))
  OR (${unnumbered} AND d.sinks <> '')
  OR EXISTS (SELECT 1 FROM log_cursors c WHERE c.part = d.part AND d.seq > c.seq AND ${routedSql(sql.ref('c.sink'))}
    AND NOT EXISTS (SELECT 1 FROM outbox r WHERE r.delivery_id = d.id AND r.sink = c.sink)))`;

/** SQL: work is pending for one of the events of the box whose id is `boxId` (a column of the outer query). */
export const boxWorkPending = (boxId: string): RawBuilder<boolean> =>
  sql<boolean>`EXISTS (SELECT 1 FROM deliveries d WHERE d.box_id = ${sql.ref(boxId)} AND ${DELIVERY_WORK_PENDING})`;
