import { randomUUID } from 'node:crypto';
import type { Kysely } from 'kysely';
import { DAY_MS, type Clock } from '../clock.js';
import { describeError, ReconcileInProgressError, RelayError } from '../errors.js';
import { untrusted, type Logger } from '../log.js';
import type { AcceptEvent } from '../store/write/accept-event.js';
import { boxesUnchangedSince, boxRecords, forgetBox, markRepaired, recordObservedState, type BoxRecord } from '../store/state/boxes.js';
import { heldEventIds } from '../store/state/events.js';
import type { LeaseNow } from '../store/engines/database-clock.js';
import { leaseOf } from '../store/state/leases.js';
import { lastFinishedRun, lastRunStartedAt, pruneRuns, readWatchStart, saveRun, type PlannedAction, type Run } from '../store/state/reconcile-runs.js';
import type { ReconcileOrigin, Schema } from '../store/schema.js';
import { PAGE_LIMIT, type UpstreamBox, type UpstreamClient } from '../upstream/client.js';
import { UpstreamApiError, UpstreamError, UpstreamInvalidResponseError } from '../upstream/errors.js';
import { nodeTimers, type Timers } from '../schedule.js';
import { LeaseLostError, ReconcileFailure, RunBoundError } from './errors.js';
import { displayText } from '../events/parse-event.js';
import { readHistoryRecord, synthesizedEvent, synthesizedType } from './history.js';
import { keepLease } from './keep-lease.js';
import { forEachPage } from './pages.js';
import type { OperatorEvents } from '../dispatch/operator-events.js';
import type { ParsedEvent } from '../events/parse-event.js';
import type { Tracing, TraceSpan } from '../tracing/tracing.js';
import { DEFAULT_ACCOUNT } from '../config/default-account.js';
import { accountKey } from '../store/account-keys.js';

const USABLE = new Set(['ready', 'idle', 'running']);
/** Dry-run reports list at most this many actions. */
const MAX_ACTIONS = 1000;
/** A box's malformed lifecycle records logged one by one; all of them are counted. */
const MAX_MALFORMED_LOGGED = 5;

export interface ReconcileMetrics {
  runs: { inc(labels: { outcome: string }): void };
  events: { inc(labels: { origin: ReconcileOrigin }): void };
  boxesForgotten: { inc(): void };
}

export interface ReconcilerDeps {
  /**
   * The account reconciled (contract section 21; default `default`): what the run finds is stored
   * under its keys, and it touches no other account's events or boxes. Its runs are one at a time
   * under a lease of its own, and its reports are its own.
   */
  account?: string;
  /** Where the API key the upstream refuses is set, for the report (default BOXRELAY_UPSTREAM_API_KEY). */
  apiKeySetting?: string;
  kysely: Kysely<Schema>;
  /** The clock the lease is compared with (the database's on PostgreSQL: see leaseClock). */
  leaseNow: LeaseNow;
  upstream: Pick<UpstreamClient, 'listBoxes' | 'listBoxEvents'>;
  accept: AcceptEvent;
  clock: Clock;
  logger: Logger;
  metrics: ReconcileMetrics;
  /** A failed run is announced as `boxrelay.reconcile.failed`. */
  operatorEvents: OperatorEvents;
  /** A run is a span of its own; the fan-out of its events joins its trace. */
  tracing: Tracing;
  retentionDays: number;
  /** A run needing more pages (all listings together) or more time ends failed (contract section 9). */
  maxPages: number;
  maxDurationMs: number;
  /** How long the lease lasts unrenewed; a run renews it every third of that while it works. */
  leaseMs?: number;
  /** Timers of the lease renewal and the run's deadline. */
  timers?: Timers;
}

export interface StartedRun {
  run: Run;
  /** Settles with the finished report; never rejects (a failure is the report's outcome). */
  finished: Promise<Run>;
}

export interface Reconciler {
  /** Starts a run now; ReconcileInProgressError when one runs anywhere (this or another replica). */
  start(options: { dryRun: boolean }): Promise<StartedRun>;
  status(): Promise<{ running: boolean; last: Run | null }>;
  /** A scheduled run: skipped when one ran (on any replica) less than `intervalMs` ago or runs now. */
  runIfDue(intervalMs: number): Promise<Run | undefined>;
  /** Cuts a run in progress short and waits for it (shutdown). */
  stop(): Promise<void>;
}

/**
 * Reconciliation (contract section 9): repairs from the upstream's box list and event histories
 * what webhooks did not bring. Events found enter through the same store-once entrance as webhooks.
 */
export function createReconciler(deps: ReconcilerDeps): Reconciler {
  const { kysely, upstream, accept, clock, metrics, account = DEFAULT_ACCOUNT, apiKeySetting = 'BOXRELAY_UPSTREAM_API_KEY' } = deps;
  const named = account !== DEFAULT_ACCOUNT;
  const log = deps.logger.child({ part: 'reconcile', ...(named ? { account } : {}) });
  const leaseMs = deps.leaseMs ?? 60_000;
  const timers = deps.timers ?? nodeTimers;
  // `default`'s lease keeps the name it had before accounts, so a replica of an earlier release still meets it.
  const lease = leaseOf(kysely, named ? `reconcile:${account}` : 'reconcile', deps.leaseNow, clock);
  /** The store's key of an upstream id of this account's, and back: reports name the upstream's ids. */
  const key = (id: string) => accountKey(account, id);
  const upstreamId = (stored: string) => (named ? stored.slice(account.length + 1) : stored);
  const holder = randomUUID();
  const stopping = new AbortController();
  let current: Promise<Run> | undefined;
  let starting = false;

  const iso = (ms: number) => new Date(ms).toISOString();

  async function start({ dryRun }: { dryRun: boolean }): Promise<StartedRun> {
    // Set before the first await: the lease lets its holder claim again, so two starts in this
    // process at once must be told apart here.
    if (current || starting) throw new ReconcileInProgressError();
    starting = true;
    try {
      return await begin(dryRun);
    } finally {
      starting = false;
    }
  }

  async function begin(dryRun: boolean): Promise<StartedRun> {
    if (!(await lease.claim(holder, leaseMs))) throw new ReconcileInProgressError();
    const startedAt = clock.now();
    const run: Run = {
      id: `rec_${randomUUID().replaceAll('-', '').slice(0, 24)}`,
      startedAt: iso(startedAt),
      finishedAt: null,
      outcome: null,
      boxesListed: 0,
      boxesRepaired: 0,
      eventsFromHistory: 0,
      eventsSynthesized: 0,
      boxesForgotten: 0,
      historyRecordsSkipped: 0,
      error: null,
      ...(dryRun ? { actions: [] } : {}),
    };
    try {
      await saveRun(kysely, run, account);
    } catch (error) {
      await lease.release(holder);
      throw error;
    }
    const span = deps.tracing.child('reconcile', 'internal', undefined, { 'boxrelay.reconcile.run_id': run.id, 'boxrelay.reconcile.dry_run': dryRun });
    log.info({ runId: run.id, dryRun, ...span.logFields }, 'reconciliation started');
    const finished = execute(run, startedAt, dryRun, span).finally(() => (current = undefined));
    current = finished;
    return { run: { ...run }, finished };
  }

  async function execute(run: Run, startedAt: number, dryRun: boolean, span: TraceSpan): Promise<Run> {
    const problems: string[] = [];
    traceparent = span.traceparent;
    // Everything that ends the run early aborts this: its requests, retry waits and next write stop.
    const abort = new AbortController();
    const stopRun = () => abort.abort(stopping.signal.reason);
    stopping.signal.addEventListener('abort', stopRun, { once: true });
    if (stopping.signal.aborted) stopRun();
    const kept = keepLease({ leases: lease, holder, ttlMs: leaseMs, clock, timers, logger: log, onLost: (error) => abort.abort(error) });
    const tooLong = () => new RunBoundError('BOXRELAY_RECONCILE_MAX_DURATION', `${Math.round(deps.maxDurationMs / 1000)} s`);
    // The deadline cuts a request under way; the clock checks below catch it between steps.
    const deadline = timers.setTimeout(async () => abort.abort(tooLong()), deps.maxDurationMs);
    const guard: RunGuard = {
      signal: abort.signal,
      pages: 0,
      async beforeWrite() {
        abort.signal.throwIfAborted();
        if (clock.now() - startedAt >= deps.maxDurationMs) abort.abort(tooLong());
        abort.signal.throwIfAborted();
        await kept.confirm();
      },
      async beforePage() {
        if (this.pages >= deps.maxPages) abort.abort(new RunBoundError('BOXRELAY_RECONCILE_MAX_PAGES', String(deps.maxPages)));
        await this.beforeWrite();
        this.pages++;
      },
    };
    try {
      await repairAll(run, startedAt, dryRun, problems, guard);
      run.outcome = problems.length > 0 ? 'failed' : dryRun ? 'dry-run' : 'succeeded';
      run.error = problems.length > 0 ? summarize(problems) : null;
    } catch (thrown) {
      // A request cut by the abort fails in its own way: the reason the run was stopped is what counts.
      const error: unknown = abort.signal.aborted ? abort.signal.reason : thrown;
      run.outcome = 'failed';
      run.error = reportedError(error, apiKeySetting);
      if (!(error instanceof ReconcileFailure || error instanceof UpstreamError || stopping.signal.aborted)) {
        log.error({ err: error, runId: run.id }, 'reconciliation failed inside the relay');
      }
    } finally {
      kept.stop();
      timers.clearTimeout(deadline);
      stopping.signal.removeEventListener('abort', stopRun);
    }
    run.finishedAt = iso(clock.now());
    metrics.runs.inc({ outcome: run.outcome });
    span.end(
      {
        'boxrelay.reconcile.outcome': run.outcome,
        'boxrelay.reconcile.boxes_listed': run.boxesListed,
        'boxrelay.reconcile.events_from_history': run.eventsFromHistory,
        'boxrelay.reconcile.events_synthesized': run.eventsSynthesized,
        'boxrelay.reconcile.history_records_skipped': run.historyRecordsSkipped,
      },
      run.outcome === 'failed' ? new Error(run.error ?? 'failed') : undefined,
    );
    const { actions: _actions, ...summary } = run;
    if (run.outcome === 'failed' && stopping.signal.aborted) {
      log.info({ ...summary }, 'reconciliation stopped by shutdown; the next run takes it up');
    } else if (run.outcome === 'failed') {
      log.error({ ...summary }, `reconciliation failed: ${run.error}`);
      await deps.operatorEvents.announce({
        type: 'boxrelay.reconcile.failed',
        account,
        data: { runId: run.id, startedAt: run.startedAt, error: run.error, ...(named ? { account } : {}) },
      });
    } else log.info({ ...summary }, dryRun ? 'reconciliation dry run finished' : 'reconciliation finished');
    try {
      await saveRun(kysely, run, account);
      await pruneRuns(kysely, startedAt - deps.retentionDays * DAY_MS);
    } catch (error) {
      log.error({ err: error, runId: run.id }, 'cannot store the reconciliation report');
    }
    await lease.release(holder).catch((error: unknown) => log.warn({ err: error }, 'cannot release the reconciliation lease; it expires by itself'));
    return run;
  }

  async function repairAll(run: Run, startedAt: number, dryRun: boolean, problems: string[], guard: RunGuard): Promise<void> {
    const watchStart = Date.parse(await readWatchStart(kysely));
    // Older records are outside the dedup window: taking one would relay it a second time.
    const oldest = Math.max(watchStart, startedAt - deps.retentionDays * DAY_MS);
    const plan = (action: PlannedAction) => {
      if (run.actions && run.actions.length < MAX_ACTIONS) run.actions.push(action);
    };

    // Step 1: the whole list first, so a bad page changes nothing and forgetting sees every box.
    const boxes: UpstreamBox[] = [];
    await forEachPage('GET /boxes', (cursor) => upstream.listBoxes(cursor, guard.signal), () => guard.beforePage(), (items) => boxes.push(...items));
    run.boxesListed = boxes.length;
    const listed = new Set<string>();

    for (let i = 0; i < boxes.length; i += PAGE_LIMIT) {
      const chunk = boxes.slice(i, i + PAGE_LIMIT);
      const records = await boxRecords(kysely, chunk.map((b) => key(b.id)));
      for (const box of chunk) {
        listed.add(key(box.id));
        // Step 2: a box unchanged since the relay's newest event, or since a run repaired it, costs nothing more.
        const record = records.get(key(box.id));
        if (record && !changedSince(box, record)) continue;
        run.boxesRepaired++;
        try {
          await repairBox(box, record, { run, oldest, dryRun, plan, guard });
        } catch (error) {
          if (guard.signal.aborted || !isBoxProblem(error)) throw error;
          const problem = reportedError(error, apiKeySetting);
          problems.push(problem);
          log.warn({ runId: run.id, boxId: untrusted(box.id) }, `box not repaired: ${problem}`);
        }
      }
    }

    // Step 5: boxes deleted upstream (absent from the complete list, unchanged during the run) are forgotten.
    const before = { iso: iso(startedAt), ms: startedAt };
    let afterId: string | undefined;
    for (;;) {
      // Only this account's boxes: another's are never absent from this upstream's list.
      const ids = await boxesUnchangedSince(kysely, before, afterId, 500, account);
      if (ids.length === 0) break;
      afterId = ids.at(-1);
      for (const id of ids.filter((id) => !listed.has(id))) {
        await guard.beforeWrite();
        if (dryRun) plan({ boxId: upstreamId(id), action: 'forget' });
        else if (await forgetBox(kysely, id)) metrics.boxesForgotten.inc();
        run.boxesForgotten++;
      }
    }
  }

  async function repairBox(
    box: UpstreamBox,
    record: BoxRecord | undefined,
    { run, oldest, dryRun, plan, guard }: { run: Run; oldest: number; dryRun: boolean; plan: (a: PlannedAction) => void; guard: RunGuard },
  ): Promise<void> {
    // Step 3: the history, all of it read before any of it is taken, oldest first. Only its
    // lifecycle events are kept: the rest (most of it) is counted and dropped page by page.
    const events: ParsedEvent[] = [];
    let skipped = 0;
    const malformed: { index: number; id: string; problem: string }[] = [];
    let index = 0;
    const operation = `GET /boxes/${untrusted(box.id)}/events`;
    await forEachPage(operation, (cursor) => upstream.listBoxEvents(box.id, cursor, guard.signal), () => guard.beforePage(), (items) => {
      for (const item of items) {
        const read = readHistoryRecord(item, box.id);
        if (read.kind === 'event') {
          if (Date.parse(read.event.createdAtIso) >= oldest) events.push(read.event);
        } else {
          skipped++;
          if (read.kind === 'malformed' && malformed.length < MAX_MALFORMED_LOGGED) malformed.push({ index, id: untrusted(read.id), problem: read.problem });
        }
        index++;
      }
    });
    run.historyRecordsSkipped += skipped;
    for (const bad of malformed) {
      log.warn({ runId: run.id, boxId: untrusted(box.id), record: bad.index, eventId: bad.id }, `history record skipped: ${bad.problem}`);
    }
    events.sort((a, b) => a.createdAtIso.localeCompare(b.createdAtIso) || a.id.localeCompare(b.id));
    const held = dryRun ? await heldEventIds(kysely, events.map((e) => key(e.id))) : new Set<string>();
    for (const event of events) {
      if (dryRun) {
        if (!held.has(key(event.id))) plan({ boxId: box.id, action: 'relay-history', eventId: event.id, type: event.type });
      } else if (await take(event, 'history', guard)) {
        run.eventsFromHistory++;
      }
    }

    // Step 4: a state the history does not explain.
    const state = stateAfter(record, events);
    const updatedAt = new Date(box.updatedAt).toISOString();
    const observed = { id: key(box.id), name: box.name === undefined ? null : displayText(box.name), state: displayText(box.state), at: updatedAt, now: clock.now() };
    if (state.value !== box.state) {
      const explainable = synthesizedType(box.state) !== undefined && Date.parse(updatedAt) >= oldest;
      // ready, idle and running are one usable state to the upstream's events: moving between them sends none.
      const eventless = state.value !== null && USABLE.has(state.value) && USABLE.has(box.state);
      if (explainable && !eventless) {
        const event = synthesizedEvent(box, state.value);
        if (dryRun) plan({ boxId: box.id, action: 'synthesize', eventId: event.id, type: event.type, state: box.state });
        else if (await take(event, 'synthesized', guard)) run.eventsSynthesized++;
      } else if (dryRun) {
        plan({ boxId: box.id, action: 'record-state', state: box.state });
      } else {
        await guard.beforeWrite();
        await recordObservedState(kysely, observed);
      }
    } else if (!dryRun && record === undefined) {
      // Its events are all stored but its row is gone (forgotten by hand): the list brings it back.
      await guard.beforeWrite();
      await recordObservedState(kysely, observed, { onlyIfMissing: true });
    }
    if (!dryRun) {
      await guard.beforeWrite();
      await markRepaired(kysely, key(box.id), updatedAt);
    }
  }

  /** The span of the run going on, which the fan-out of the events it takes joins. */
  let traceparent: string | undefined;

  /** The receiver's store-once path; true when the event was new. */
  async function take(event: ParsedEvent, origin: ReconcileOrigin, guard: RunGuard): Promise<boolean> {
    await guard.beforeWrite();
    const stored = await accept({ event, account, receivedAt: clock.now(), attempt: null, origin, traceparent });
    if (stored.duplicate) return false;
    metrics.events.inc({ origin });
    return true;
  }

  return {
    start,
    async status() {
      const running = current !== undefined || (await lease.held());
      return { running, last: await lastFinishedRun(kysely, account) };
    },
    async runIfDue(intervalMs) {
      const last = await lastRunStartedAt(kysely, account);
      // A little slack, so replicas whose timers drift apart do not skip a whole interval.
      if (last !== null && clock.now() - last < intervalMs * 0.9) return undefined;
      try {
        return await (await start({ dryRun: false })).finished;
      } catch (error) {
        if (error instanceof ReconcileInProgressError) return undefined;
        throw error;
      }
    },
    async stop() {
      stopping.abort();
      await current;
    },
  };
}

/** What a run checks before each upstream page and each write: its bounds, and that it still holds the lease. */
interface RunGuard {
  /** Aborted when the run must stop (lease lost, a bound reached, shutdown). */
  signal: AbortSignal;
  /** Pages read so far, all listings together. */
  pages: number;
  beforePage(): Promise<void>;
  beforeWrite(): Promise<void>;
}

function changedSince(box: UpstreamBox, record: BoxRecord): boolean {
  const updatedAt = Date.parse(box.updatedAt);
  const known = [record.newestEventAt, record.repairedUpTo].filter((t) => t !== null).map((t) => Date.parse(t));
  return known.every((t) => updatedAt > t);
}

/** The box's state once these events are applied the way the store applies them (newest wins; hydration keeps the state). */
function stateAfter(record: BoxRecord | undefined, events: ParsedEvent[]): { value: string | null } {
  let value = record?.state ?? null;
  let at = record?.stateChangedAt ?? '';
  for (const event of events) {
    if (event.type === 'box.hydrated' || event.state === null) continue;
    if (event.createdAtIso >= at) {
      value = event.state;
      at = event.createdAtIso;
    }
  }
  return { value };
}

/** Failures that concern one box's history: the run goes on with the others and ends failed. */
function isBoxProblem(error: unknown): boolean {
  if (error instanceof LeaseLostError || error instanceof RunBoundError) return false;
  if (error instanceof ReconcileFailure || error instanceof UpstreamInvalidResponseError) return true;
  // Deleted between the list and the history read: forgotten by a later run.
  return error instanceof UpstreamApiError && error.status === 404;
}

/** What a run's report (shown by the admin API) says of a failure: the relay's own errors in full, any other only that it happened. */
function reportedError(error: unknown, apiKeySetting: string): string {
  if (error instanceof UpstreamApiError && (error.status === 401 || error.status === 403)) {
    return `the upstream refused the API key (${error.status}): ${apiKeySetting} must be a valid account-wide key. ${describeError(error)}`;
  }
  if (error instanceof RelayError) return describeError(error);
  if (error instanceof Error && error.name === 'AbortError') return 'stopped by shutdown';
  return 'internal error (see the log)';
}

function summarize(problems: string[]): string {
  const shown = problems.slice(0, 3).join('; ');
  return problems.length > 3 ? `${problems.length} boxes not repaired: ${shown}; …` : shown;
}
