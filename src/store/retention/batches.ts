import { setTimeout as pause } from 'node:timers/promises';
import { sql, type RawBuilder } from 'kysely';
import { runStatementTransaction } from '../engines/transactions.js';
import type { Database } from '../engines/database.js';
import { once } from '../engines/sqlite-writes.js';

/** What every step of a retention pass is given. */
export interface BatchContext {
  database: Database;
  /** Rows per statement, batch by batch. */
  pace: BatchPace;
  /** Stops between batches (shutdown); what was removed so far stays removed. */
  signal?: AbortSignal | undefined;
  /** Counts the rows a batch removed (kept when a later batch of the step fails). */
  removed(rows: number): void;
}

/**
 * A batch that commits within this long is about right: the next is as large. On SQLite a batch holds
 * the one writer, which commits the deliveries too, so it stays short. On PostgreSQL a batch locks only
 * expired rows no delivery writes; what it takes from the intake is shared CPU and I/O, which the rest
 * after each batch halves, so it may run longer (a target of 20 ms there collapsed the batches to a
 * few rows on a busy machine, and a pass over a million deliveries never ended).
 */
export const TARGET_BATCH_MS = { sqlite: 20, postgres: 100 } as const;

/** The least rest between two batches: a timer, so every callback pending runs in between. */
const MIN_PAUSE_MS = 2;

/**
 * How many rows the next batch takes: from the statement's cost, not a fixed count, so a pass over
 * millions of rows goes as fast as short statements allow and no faster. Doubled after a batch done
 * in under half the target, halved after one over it; never above `most`, nor below the first size:
 * on a busy machine a batch's fixed cost (its round trips, the wait for a turn) alone can outlast the
 * target, and halving then only ever shrank the batches, to one row each (a pass over a million
 * deliveries removed 86 a second).
 */
export interface BatchPace {
  readonly size: number;
  /** The batch just made held the writer this long. */
  took(ms: number): void;
}

export function batchPace(most: number, { targetMs = TARGET_BATCH_MS.sqlite, first = Math.min(most, 50) }: { targetMs?: number; first?: number } = {}): BatchPace {
  let size = first;
  return {
    get size() {
      return size;
    },
    took(ms) {
      if (ms < targetMs / 2) size = Math.min(most, size * 2);
      else if (ms > targetMs) size = Math.max(first, Math.floor(size / 2));
    },
  };
}

/**
 * Runs bounded batches, each of the pace's size, until one says no more is left. After every batch
 * the writer (on SQLite the storage thread, which commits the deliveries too) is left to others for
 * at least as long as the batch held it, its sync included: a batch commits with the configured sync
 * (`runStatementTransaction`), so the sync of the WAL frames it wrote is part of the time the pace
 * sizes batches by. Committed without one, a batch looked quick, grew to thousands of rows, and the
 * next delivery's commit paid for syncing its frames (intake p99 261 ms, max 436 ms, while a million
 * deliveries were pruned).
 */
export async function inBatches(context: BatchContext, batch: (size: number) => Promise<{ removed: number; more: boolean }>): Promise<void> {
  while (!context.signal?.aborted) {
    const started = performance.now();
    const { removed, more } = await batch(context.pace.size);
    const heldMs = performance.now() - started;
    context.removed(removed);
    context.pace.took(heldMs);
    // The last batch too: the next step's (or the next sink's) first batch follows at once otherwise.
    await pause(Math.max(MIN_PAUSE_MS, heldMs));
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
  const [removed] = await runStatementTransaction(database, [once(statement.compile(database.kysely))]);
  return removed?.rows.length ?? 0;
}

/** Every row that `rows` picks, removed in batches of `deleteSome`. */
export function deleteAll(context: BatchContext, rows: RowsOf): Promise<void> {
  return inBatches(context, async (size) => {
    const removed = await deleteSome(context.database, rows, size);
    return { removed, more: removed >= size };
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
