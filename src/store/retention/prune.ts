import { setTimeout as pause } from 'node:timers/promises';
import { sql, type ExpressionBuilder } from 'kysely';
import { DAY_MS } from '../../clock.js';
import { describeError, RelayError } from '../../errors.js';
import type { Logger } from '../../log.js';
import type { Database } from '../engines/database.js';
import { once } from '../engines/sqlite-writes.js';
import { runStatementTransaction } from '../engines/transactions.js';
import type { Schema } from '../schema.js';
import { DELIVERY_WORK_PENDING, boxWorkPending } from './pending-work.js';
import { trimAttemptsBeyondKept } from '../attempts/prune-attempts.js';
import { TARGET_BATCH_MS, batchPace, deleteAll, deleteExpiredBySink, inBatches, type BatchContext } from './batches.js';

export interface PruneOptions {
  /** Epoch ms. */
  now: number;
  retentionDays: number;
  /**
   * The most rows per DELETE. Within it each batch is sized by how long the one before held the
   * writer (`batchPace`), so no statement holds it for long whatever a row costs.
   */
  batchSize?: number;
  /** Stops between batches (shutdown); what was removed so far stays removed. */
  signal?: AbortSignal | undefined;
  /** Where a step's failure is told (each attempt); without one, only the result names the steps that failed. */
  logger?: Logger | undefined;
  /** The rest before a failed step is tried again. */
  retryDelayMs?: number;
}

export interface PruneResult {
  /** Epoch ms: what was received (or last seen) before this was removed. */
  cutoff: number;
  deliveries: number;
  boxes: number;
  /**
   * Signing secrets past their expiry (those of a finished rotation). Not `secrets`: the logger
   * redacts that path, and a count is no secret.
   */
  expiredSecrets: number;
  /** Audit entries (contract section 15). */
  audit: number;
  /** Rows each step removed, by step name (every step of `RETENTION_STEPS`). */
  removed: Record<string, number>;
  /** Steps that failed every attempt, in pass order; the pass went on past each. */
  failedSteps: string[];
}

/** A step failed every attempt of a pass. */
export class RetentionStepError extends RelayError {
  readonly code = 'retention_step_failed';
  constructor(
    readonly step: string,
    attempts: number,
    cause: unknown,
  ) {
    super(`retention step "${step}" failed ${attempts === 1 ? 'once' : `${attempts} times`}: ${describeError(cause)}`, { cause });
  }
}

interface StepContext extends BatchContext {
  /** Epoch ms: received (or last seen, or started) before this is past the window. */
  cutoff: number;
  now: number;
}

/**
 * One step of the pass: removes one kind of row, in bounded batches that each commit at once (a
 * step stopped half-way leaves only whole batches done, and is simply run again).
 */
export interface RetentionStep {
  name: string;
  run(context: StepContext): Promise<void>;
}

/**
 * A box retention may forget: not in `error` (its alert must not clear while nobody acted: a newer
 * event, a reconcile run or an operator's forget changes it), and no work pending for its events.
 */
const forgettable = (box: 'b' | 'boxes') =>
  sql<boolean>`(${sql.ref(`${box}.state`)} IS NULL OR ${sql.ref(`${box}.state`)} <> 'error') AND NOT ${boxWorkPending(`${box}.id`)}`;

/**
 * Deliveries read per statement of the deliveries' pass, in batches of this many: a run of kept
 * deliveries (a paused hook's backlog, dead letters) is read a window at a time, the event loop
 * turning between windows, rather than in one statement on the receive thread however long it is.
 */
const DELIVERY_WINDOW_BATCHES = 4;

/**
 * Expired deliveries whose fan-out is all settled, with their settled outbox rows; in receipt order
 * from where the last batch ended, so deliveries kept for pending work are read once a pass, and a
 * window of them per statement: the window's end is found by the received_at index alone, and only
 * the deliveries up to it are checked for pending work.
 */
async function pruneDeliveries(context: StepContext): Promise<void> {
  const { database, cutoff } = context;
  const { kysely } = database;
  type Place = { received_at: number; id: string };
  const past = (place: Place, strictly: boolean) => (eb: ExpressionBuilder<Schema & { d: Schema['deliveries'] }, 'd'>) =>
    eb.or([eb('d.received_at', strictly ? '>' : '<', place.received_at), eb.and([eb('d.received_at', '=', place.received_at), eb('d.id', strictly ? '>' : '<=', place.id)])]);
  let after: Place | undefined;
  await inBatches(context, async (batchSize) => {
    const inOrder = kysely
      .selectFrom('deliveries as d')
      .select(['d.id', 'd.received_at'])
      .$if(after !== undefined, (q) => q.where('d.received_at', '>=', after!.received_at).where(past(after!, true)))
      .orderBy('d.received_at')
      .orderBy('d.id');
    const end = await inOrder
      .where('d.received_at', '<', cutoff)
      .offset(batchSize * DELIVERY_WINDOW_BATCHES - 1)
      .limit(1)
      .executeTakeFirst();
    // One upper bound, the window's end (else the cutoff), so the index is walked up to it and no further.
    const expired = await (end === undefined ? inOrder.where('d.received_at', '<', cutoff) : inOrder.where('d.received_at', '<=', end.received_at).where(past(end, false)))
      .where(sql<boolean>`NOT ${DELIVERY_WORK_PENDING}`)
      .limit(batchSize)
      .execute();
    const full = expired.length === batchSize;
    const last = expired[expired.length - 1];
    // A full batch may leave more of its window; otherwise the window is done.
    after = full ? { received_at: Number(last!.received_at), id: last!.id } : end && { received_at: Number(end.received_at), id: end.id };
    if (last === undefined) return { removed: 0, more: end !== undefined };
    const ids = expired.map((d) => d.id);
    // Its rows go first, then the deliveries that have none left (a replay may have queued one meanwhile: that one stays).
    const [, removed] = await runStatementTransaction(database, [
      once(kysely.deleteFrom('outbox').where('delivery_id', 'in', ids).where('status', 'in', ['delivered', 'discarded']).compile()),
      once(
        kysely
          .deleteFrom('deliveries')
          .where('id', 'in', ids)
          .where(({ not, exists, selectFrom }) => not(exists(selectFrom('outbox').select('outbox.id').whereRef('outbox.delivery_id', '=', 'deliveries.id'))))
          .returning('id')
          .compile(),
      ),
    ]);
    return { removed: removed?.rows.length ?? 0, more: full || end !== undefined };
  });
}

/** Boxes read per statement of the boxes' pass, in batches of this many deletes. */
const BOX_WINDOW_BATCHES = 100;

/**
 * Boxes not heard of within the window, unless in `error` or with work pending. In id order, a
 * window of boxes per statement: last_seen_at has no index (every stored event would move its
 * entry), so a pass reads each box once, in bounded steps.
 */
async function forgetBoxes(context: StepContext): Promise<void> {
  const { database, cutoff } = context;
  const { kysely } = database;
  let after: string | undefined;
  await inBatches(context, async (batchSize) => {
    const window = batchSize * BOX_WINDOW_BATCHES;
    const inWindow = kysely
      .selectFrom('boxes as b')
      .select('b.id')
      .$if(after !== undefined, (q) => q.where('b.id', '>', after!))
      .orderBy('b.id');
    const end = (await inWindow.offset(window - 1).limit(1).executeTakeFirst())?.id;
    const batch = await inWindow
      .$if(end !== undefined, (q) => q.where('b.id', '<=', end!))
      .where('b.last_seen_at', '<', cutoff)
      .where(forgettable('b'))
      .limit(batchSize)
      .execute();
    const full = batch.length === batchSize;
    // A full batch may leave more of its window; otherwise the window is done.
    after = full ? batch[batch.length - 1]!.id : end;
    if (batch.length === 0) return { removed: 0, more: end !== undefined };
    // Checked again: an event or a replay may have come for the box since.
    const [removed] = await runStatementTransaction(database, [
      once(
        kysely
          .deleteFrom('boxes')
          .where('id', 'in', batch.map((box) => box.id))
          .where('last_seen_at', '<', cutoff)
          .where(forgettable('boxes'))
          .returning('id')
          .compile(),
      ),
    ]);
    return { removed: removed?.rows.length ?? 0, more: full || end !== undefined };
  });
}

/**
 * The steps of a daily pass, in order; each is run (and, failing, tried again) whatever came of the
 * ones before. A new kind of row kept for the window is one more entry here.
 */
export const RETENTION_STEPS: readonly RetentionStep[] = [
  { name: 'deliveries', run: pruneDeliveries },
  { name: 'boxes', run: forgetBoxes },
  // Audit entries and the per-minute delivery counts are kept for the same window.
  { name: 'audit', run: (c) => deleteAll(c, { table: 'audit', where: sql<boolean>`at < ${c.cutoff}`, orderBy: 'at' }) },
  { name: 'sink minutes', run: (c) => deleteAll(c, { table: 'sink_minutes', where: sql<boolean>`minute < ${c.cutoff}`, orderBy: 'minute' }) },
  { name: 'attempts', run: (c) => deleteExpiredBySink(c, 'attempts', 'at', c.cutoff) },
  { name: 'attempts beyond 50', run: trimAttemptsBeyondKept },
  // Sink health's per-minute sums, kept as long as the attempts.
  {
    name: 'attempt minutes',
    run: async (c) => {
      await deleteExpiredBySink(c, 'attempt_minutes', 'minute', c.cutoff);
      await deleteExpiredBySink(c, 'attempt_statuses', 'minute', c.cutoff);
    },
  },
  // When cursors passed positions that retention has removed, and readers long gone.
  { name: 'log marks', run: (c) => deleteAll(c, { table: 'log_marks', where: sql<boolean>`at < ${c.cutoff}`, orderBy: 'at' }) },
  { name: 'log readers', run: (c) => deleteAll(c, { table: 'log_readers', where: sql<boolean>`seen_at < ${c.cutoff}` }) },
  // The S3 archive's record of written objects: an event past the window is read from the log no more.
  // An object S3 does not have yet stays, with its events, until whoever meets them writes it.
  {
    name: 'archive ledger',
    run: async (c) => {
      await deleteAll(c, {
        table: 'archive_items',
        where: sql<boolean>`created_at < ${c.cutoff} AND NOT EXISTS (SELECT 1 FROM archive_objects o WHERE o.key = archive_items.object_key AND o.written_at IS NULL)`,
        orderBy: 'created_at',
      });
      await deleteAll(c, { table: 'archive_objects', where: sql<boolean>`created_at < ${c.cutoff} AND written_at IS NOT NULL`, orderBy: 'created_at' });
    },
  },
  // An expired secret verifies nothing any more; kept, it would only be a secret at rest.
  { name: 'expired secrets', run: (c) => deleteAll(c, { table: 'secrets', where: sql<boolean>`expires_at < ${c.now}` }) },
];

/** The most rows a batch takes, however quick: a bound on what one statement can hold the writer for. */
const MOST_PER_BATCH = 5000;

/** Attempts of one step in a pass: a failure that passes (a lock, a timeout, a restart of the server) is tried again. */
const STEP_ATTEMPTS = 3;

/**
 * Retention: removes deliveries older than `retentionDays` with their settled outbox rows
 * (delivered, discarded), boxes not heard of for as long (unless in `error`, or with work pending),
 * audit entries, delivery counts, attempts and cursor marks as old, and signing secrets past their
 * expiry, one step after another (`RETENTION_STEPS`). A delivery stays while work for it is pending
 * (an outbox row pending, a dead letter or set aside, or a sink it was routed to has not read it from
 * the log), so retention never loses undelivered events. Removing a delivery ends its dedup
 * protection: the dedup window is the retention period.
 *
 * Every batch is bounded by the pace and commits on its own, with the configured sync (on SQLite in
 * the writer's group commit: the sync of its WAL frames counts in its time, so the pace keeps it
 * short); the event loop runs between batches. The pages they dirty are copied into the database
 * file by the background checkpointer (src/store/engines/checkpointer.ts), not on this connection. A step that fails is tried again, then told and left for the next pass: the
 * steps after it run all the same.
 */
export async function pruneExpired(database: Database, options: PruneOptions): Promise<PruneResult> {
  const { signal, logger } = options;
  const cutoff = options.now - options.retentionDays * DAY_MS;
  const removed: Record<string, number> = {};
  const failedSteps: string[] = [];
  for (const step of RETENTION_STEPS) {
    removed[step.name] = 0;
    const context: StepContext = {
      database,
      pace: batchPace(options.batchSize ?? MOST_PER_BATCH, { targetMs: TARGET_BATCH_MS[database.dialect] }),
      signal,
      cutoff,
      now: options.now,
      removed: (rows) => void (removed[step.name] = (removed[step.name] ?? 0) + rows),
    };
    for (let attempt = 1; !signal?.aborted; attempt++) {
      try {
        await step.run(context);
        break;
      } catch (error) {
        if (attempt >= STEP_ATTEMPTS) {
          failedSteps.push(step.name);
          logger?.error({ err: new RetentionStepError(step.name, attempt, error), step: step.name }, `retention step "${step.name}" failed; the pass goes on, and the next one tries it again`);
          break;
        }
        logger?.warn({ err: error, step: step.name, attempt }, `retention step "${step.name}" failed; trying it again`);
        await pause(options.retryDelayMs ?? 1000, undefined, { signal }).catch(() => {});
      }
    }
  }
  return {
    cutoff,
    deliveries: removed.deliveries ?? 0,
    boxes: removed.boxes ?? 0,
    expiredSecrets: removed['expired secrets'] ?? 0,
    audit: removed.audit ?? 0,
    removed,
    failedSteps,
  };
}

export function describePrune(result: PruneResult): string {
  return (
    `removed deliveries: ${result.deliveries}, boxes: ${result.boxes} (older than ${new Date(result.cutoff).toISOString()}), ` +
    `expired secrets: ${result.expiredSecrets}, audit entries: ${result.audit}` +
    (result.failedSteps.length > 0 ? `; failed steps (left for the next run): ${result.failedSteps.join(', ')}` : '')
  );
}
