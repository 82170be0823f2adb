import { setImmediate as turn } from 'node:timers/promises';
import { sql } from 'kysely';
import { describeError, RelayError } from '../../errors.js';
import type { Database } from '../engines/database.js';
import { leaseClock } from '../engines/database-clock.js';
import { runNamedTransaction, type NamedTransaction } from '../engines/transactions.js';
import { SINK_NOT_CONFIGURED } from '../exceptions/rows.js';
import { logHead } from './cursors.js';
import { routedWithoutRow } from './position.js';

/** Log entries (and outbox rows) set aside per transaction: each commits quickly, whatever the backlog. */
export const SET_ASIDE_BATCH = 500;

/** One step of setting a sink's work aside failed; the steps before it stay done. */
export class SetAsideError extends RelayError {
  readonly code = 'set_aside_failed';
  constructor(
    readonly sink: string,
    readonly step: string,
    cause: unknown,
  ) {
    super(`could not set aside the work of sink ${sink} (${step}): ${describeError(cause)}`, { cause });
  }
}

/** How far a run of steps got: what it changed, and whether it reached the end or stopped at its limit. */
export interface StepsRun {
  changed: number;
  done: boolean;
}

/**
 * Runs `step` until it says it is done or `maxSteps` have run, with a turn of the event loop between
 * two runs; a failure names the sink and the step.
 */
export async function inSteps(sink: string, name: string, step: () => Promise<StepsRun>, maxSteps = Infinity): Promise<StepsRun> {
  let changed = 0;
  for (let run = 1; ; run++) {
    let outcome: StepsRun;
    try {
      outcome = await step();
    } catch (error) {
      throw new SetAsideError(sink, name, error);
    }
    changed += outcome.changed;
    if (outcome.done || run >= maxSteps) return { changed, done: outcome.done };
    await turn();
  }
}

/** One step of `setAsideLog`: the head it goes up to (the log's at the first step), and whether it got there. */
interface SetAsideStep {
  sink: string;
  now: number;
  batchSize: number;
  head: number | undefined;
}

/**
 * Reads which cursors are free before it writes, in one transaction: the writer runs it whole
 * (`runNamedTransaction`), so no partition can be taken between the read and the move.
 */
export const SET_ASIDE_LOG_STEP: NamedTransaction<SetAsideStep, { changed: number; done: boolean; head: number }> = {
  name: 'setAsideLogStep',
  *steps(database, { sink, now, batchSize, head: atStart }) {
    const db = database.kysely;
    const lock = database.dialect === 'postgres' ? sql`FOR UPDATE` : sql``;
    const { rows } = yield sql`SELECT ${logHead(database)} AS seq, ${leaseClock(database)(now)} AS at`.compile(db);
    const [current] = rows as [{ seq: number; at: number }];
    const head = atStart ?? Number(current.seq);
    // In one order, so two steps (of two replicas) never lock the same cursors crosswise.
    const free = (yield sql`SELECT part, seq FROM log_cursors WHERE sink = ${sink} AND seq < ${head}
      AND (lease_until IS NULL OR lease_until <= ${current.at}) ORDER BY part ${lock}`.compile(db)).rows as { part: number; seq: number }[];
    if (free.length === 0) return { changed: 0, done: true, head };
    const from = Math.min(...free.map((cursor) => Number(cursor.seq)));
    // The step ends after `batchSize` entries of the log (of any partition) past the furthest-behind cursor.
    const { rows: ends } = yield sql`SELECT seq FROM deliveries WHERE seq > ${from} AND seq <= ${head}
      ORDER BY seq LIMIT 1 OFFSET ${batchSize - 1}`.compile(db);
    const upTo = ends.length > 0 ? Number((ends[0] as { seq: number }).seq) : head;
    const parts = sql.join(free.map(({ part }) => part));
    // `d.seq > from` as a constant: without it PostgreSQL's planner cannot bound the range by the
    // cursors' positions, and at a million entries scans the whole log past the statement timeout.
    const { changed } = yield sql`INSERT INTO outbox (delivery_id, sink, status, attempts, next_attempt_at, last_error, created_at, updated_at, box_id, trace_parent)
      SELECT d.id, ${sink}, 'set_aside', 0, ${now}, ${SINK_NOT_CONFIGURED}, ${now}, ${now}, d.box_id, d.trace_parent
      FROM log_cursors c JOIN deliveries d ON d.part = c.part
      WHERE c.sink = ${sink} AND c.part IN (${parts}) AND d.seq > ${from} AND d.seq > c.seq AND d.seq <= ${upTo} AND ${routedWithoutRow(sink)}
      ORDER BY d.seq`.compile(db);
    yield sql`UPDATE log_cursors SET seq = ${upTo}, updated_at = ${now} WHERE sink = ${sink} AND part IN (${parts}) AND seq < ${upTo}`.compile(db);
    return { changed, done: upTo >= head, head };
  },
};

/**
 * The log of a sink no replica serves: its routed deliveries past the cursors of partitions no live
 * lease holds (and without a row of that sink: those are set aside as rows) become set-aside rows,
 * and those cursors move on, up to the head as it was at the call. In steps of at most `batchSize`
 * log entries, each its own transaction: the free cursors are locked first and only they are moved,
 * over the entries set aside in the same transaction, so a partition taken between two steps keeps
 * its cursor and its entries. At most `maxSteps` steps: the caller calls again for the rest.
 */
export async function setAsideLog(database: Database, sink: string, now: number, batchSize = SET_ASIDE_BATCH, maxSteps = Infinity): Promise<StepsRun> {
  let head: number | undefined;
  return inSteps(
    sink,
    'the log past its cursors',
    async () => {
      const step = await runNamedTransaction(database, SET_ASIDE_LOG_STEP, { sink, now, batchSize, head });
      head = step.head;
      return step;
    },
    maxSteps,
  );
}
