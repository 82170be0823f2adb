import { setTimeout as pause } from 'node:timers/promises';
import { sql, type RawBuilder } from 'kysely';
import type { Database } from '../engines/database.js';
import { executeUnsynced } from '../engines/unsynced.js';

/** What every step of a retention pass is given. */
export interface BatchContext {
  database: Database;
  /** Rows per statement. */
  batchSize: number;
  /** Stops between batches (shutdown); what was removed so far stays removed. */
  signal?: AbortSignal | undefined;
  /** Counts the rows a batch removed (kept when a later batch of the step fails). */
  removed(rows: number): void;
}

/**
 * The least rest between two batches, so that a pass under load adds a bounded stream of writes
 * (on SQLite a statement blocks the event loop and the group-commit writer alike).
 */
const MIN_PAUSE_MS = 50;

/**
 * Runs bounded batches until one says no more is left. After every batch the connection (and, on
 * SQLite, whose statements are synchronous, the event loop) is left to requests for at least as
 * long as the batch held it: a timer, so every pending callback runs in between.
 */
export async function inBatches(context: BatchContext, batch: () => Promise<{ removed: number; more: boolean }>): Promise<void> {
  while (!context.signal?.aborted) {
    const started = performance.now();
    const { removed, more } = await batch();
    context.removed(removed);
    // The last batch too: the next step's (or the next sink's) first batch follows at once otherwise.
    await pause(Math.max(MIN_PAUSE_MS, performance.now() - started));
    if (!more) return;
  }
}

/** Rows of one table a bounded delete picks. */
export interface RowsOf {
  table: string;
  /** A condition an index serves. */
  where: RawBuilder<boolean>;
  /** The column of that index to take the rows in, oldest first, so the planner walks the index. */
  orderBy?: string;
}

/**
 * Removes at most `limit` rows that `rows` picks, by their row address: one short statement
 * whatever the table holds. Answers how many went.
 */
export async function deleteSome(database: Database, { table, where, orderBy }: RowsOf, limit: number): Promise<number> {
  const from = sql.table(table);
  const order = orderBy === undefined ? sql`` : sql` ORDER BY ${sql.ref(orderBy)}`;
  // PostgreSQL reaches rows by ctid only from an array (a TID scan), not from IN (subquery).
  const statement =
    database.dialect === 'postgres'
      ? sql<{ one: number }>`DELETE FROM ${from} WHERE ctid = ANY(ARRAY(SELECT ctid FROM ${from} WHERE ${where}${order} LIMIT ${limit})) RETURNING 1 AS one`
      : sql<{ one: number }>`DELETE FROM ${from} WHERE rowid IN (SELECT rowid FROM ${from} WHERE ${where}${order} LIMIT ${limit}) RETURNING 1 AS one`;
  const { kysely } = database;
  const removed = await executeUnsynced(database, {
    compile: () => statement.compile(kysely),
    execute: async () => (await statement.execute(kysely)).rows,
  });
  return removed.length;
}

/** Every row that `rows` picks, removed in batches of `deleteSome`. */
export function deleteAll(context: BatchContext, rows: RowsOf): Promise<void> {
  return inBatches(context, async () => {
    const removed = await deleteSome(context.database, rows, context.batchSize);
    return { removed, more: removed >= context.batchSize };
  });
}

/**
 * Rows of a table keyed by (sink, time) whose time is before `cutoff`: sink by sink, in batches on
 * that key; the sinks found by a walk of index seeks, not a scan.
 */
export async function deleteExpiredBySink(context: BatchContext, table: string, time: string, cutoff: number): Promise<void> {
  const from = sql.table(table);
  const { rows: sinks } = await sql<{ sink: string }>`
    WITH RECURSIVE s(sink) AS (
      SELECT min(sink) FROM ${from}
      UNION ALL SELECT (SELECT min(sink) FROM ${from} WHERE sink > s.sink) FROM s WHERE s.sink IS NOT NULL
    )
    SELECT sink FROM s WHERE sink IS NOT NULL`.execute(context.database.kysely);
  for (const { sink } of sinks) {
    if (context.signal?.aborted) return;
    await deleteAll(context, { table, where: sql<boolean>`sink = ${sink} AND ${sql.ref(time)} < ${cutoff}`, orderBy: time });
  }
}
