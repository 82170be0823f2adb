import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Clock } from '../clock.js';
import type { Logger } from '../log.js';
import type { SinkOutcome } from '../metrics/metrics.js';
import { EventFailure } from '../sinks/failures.js';
import type { Sink } from '../sinks/sink.js';
import { routedTo } from '../store/log/position.js';
import type { LogEntry } from '../store/log/read-log.js';
import type { Outbox } from '../store/exceptions/outbox.js';
import type { ClaimedRow, Delivered } from '../store/exceptions/rows.js';
import type { NewException } from '../store/exceptions/claims.js';
import type { SinkState, SinkStates } from '../store/state/sink-state.js';
import { attemptDelivery, type Outcome } from './attempt.js';
import type { OperatorEvents } from './operator-events.js';
import { createLogPartitions } from './log-partitions.js';
import { recentEvents } from './recent-events.js';
import type { Pauses } from './pauses.js';
import { logFieldsOf, type Tracing } from '../tracing/tracing.js';
import { defaultTuning, leaseMsFor, workMsFor, type DispatchTuning } from './tuning.js';

export interface DispatcherDeps {
  outbox: Outbox;
  sinks: Sink[];
  clock: Clock;
  logger: Logger;
  metrics: DispatchMetrics;
  /** CloudEvents `source`. */
  source: string;
  /** Only this process serves the database (SQLite): leases left by a previous run are stale at start. */
  exclusive: boolean;
  sinkStates: SinkStates;
  pauses: Pauses;
  operatorEvents: OperatorEvents;
  tracing: Tracing;
  tuning?: Partial<DispatchTuning>;
  /** Names this dispatcher's leases (the fan-out thread names its worker's, to free them if it dies); a new one by default. */
  owner?: string;
}

/** A name for one dispatcher's leases: its host and process, and unique within the process. */
export const leaseOwner = (): string => `${hostname()}:${process.pid}:${randomUUID().slice(0, 8)}`;

/** The metrics the dispatcher updates (in the fan-out worker, recorded and reported to the main thread's). */
export interface DispatchMetrics {
  sinkDeliveries: { inc(labels: { sink: string; outcome: SinkOutcome }, count?: number): void };
  sinkDeliveryDuration: { observe(labels: { sink: string }, seconds: number): void };
}

export interface Dispatcher {
  /** Identifies this process's leases. */
  readonly owner: string;
  start(): Promise<void>;
  /**
   * After a commit of new deliveries (`log`: only the log has new work), or a dead letter retry, a
   * replay or a resume (`all`: outbox rows too).
   */
  wake(scope?: WakeScope): void;
  /** A sink was paused or resumed: its lane reads the state again and looks for work. */
  sinkStateChanged(sink: string): void;
  stop(graceMs: number): Promise<void>;
}

export type WakeScope = 'log' | 'all';

/** What a write tried until it holds gives when the dispatcher stops first. */
const STOPPED = Symbol('stopped');

/** How often a lane notes when its cursors moved (the delivery time an event's status shows is at most this late). */
const MARK_EVERY_MS = 1000;

/** A replica says which sinks it serves several times per grace period, so one late heartbeat never looks like none. */
const serveIntervalMs = (graceMs: number): number => Math.max(1000, Math.min(30_000, graceMs / 4));

/** How a claimed row is tried: normally, or as the one probe attempt of a sink paused by its failures. */
type Trial = 'normal' | 'probe';

/** What an attempt run needs of an event, whether a claimed outbox row or a log entry. */
interface Work {
  eventId: string;
  /** The claimed row's id; none for a log entry. */
  rowId?: number | undefined;
  /** Attempts made before (0 for a fresh event: quick retries in process). */
  attempts: number;
  boxId: string | null;
  traceparent: string | null;
  payload: string;
  origin: string | null;
}

const workOfRow = (row: ClaimedRow): Work => ({
  eventId: row.deliveryId,
  rowId: row.id,
  attempts: row.attempts,
  boxId: row.boxId,
  traceparent: row.traceparent,
  payload: row.payload ?? '',
  origin: row.origin,
});

const workOfEntry = (entry: LogEntry): Work => ({
  eventId: entry.id,
  attempts: 0,
  boxId: entry.boxId,
  traceparent: entry.traceparent,
  payload: entry.payload,
  origin: entry.origin,
});

/** The outbox row of a log entry's outcome. */
const exceptionOf = (sink: Sink, entry: LogEntry, outcome: Pick<NewException, 'status' | 'attempts' | 'lastError' | 'nextAttemptAt' | 'now'>): NewException => ({
  deliveryId: entry.id,
  sink: sink.name,
  boxId: entry.boxId,
  traceparent: entry.traceparent,
  ...outcome,
});

/** What an event's attempts come to, to be written down. `wait`: another attempt later (or when a paused sink resumes). */
type Verdict =
  | { kind: 'delivered'; attempts: number; lastError: string | null; now: number }
  | { kind: 'dead'; attempts: number; lastError: string; now: number }
  | { kind: 'wait'; attempts: number; lastError: string; nextAttemptAt: number; now: number }
  | { kind: 'undone' };

/** How a log entry ended here: `waiting` for a retry as an outbox row (its box's later events wait behind it), or `undone` (a stop). */
type EntryFate = 'delivered' | 'dead' | 'waiting' | 'undone';

/**
 * Moves committed outbox rows to the sinks. Each sink has its own lane (claims, concurrency, timers),
 * so a slow or dead hook never delays NATS or another hook. Rows are leased while worked on; a
 * process that dies leaves leases that expire, so the work is never lost, only delayed.
 */
export function createDispatcher(deps: DispatcherDeps): Dispatcher {
  const { outbox, clock, metrics, sinkStates, pauses } = deps;
  const tuning: DispatchTuning = { ...defaultTuning, ...deps.tuning };
  const log = deps.logger.child({ part: 'dispatch' });
  const owner = deps.owner ?? leaseOwner();
  /** An event's CloudEvent is built once for all its sinks, whose lanes read it within moments of each other. */
  const eventOf = recentEvents(deps.source);
  const stopping = new AbortController();
  const cut = new AbortController();
  /** Deliveries and claims under way; stop() waits for all of them. */
  const inFlight = new Set<Promise<void>>();
  let pollTimer: NodeJS.Timeout | undefined;
  let serveTimer: NodeJS.Timeout | undefined;
  /** Nothing is claimed before start() has set aside and released what it must. */
  let running = false;

  /**
   * Rows this process is working on, or has delivered and not yet recorded. A claim that finds one
   * again (its lease ran out while the attempt or the record took long) must not send it twice.
   */
  const working = new Set<number>();
  const recording = new Set<number>();

  /** Delivered rows are recorded in batches: one statement for the acks that arrive together. */
  let delivered: Delivered[] = [];
  let flushing: Promise<void> = Promise.resolve();
  const flushDelivered = (): Promise<void> => {
    const batch = delivered;
    delivered = [];
    if (batch.length === 0) return flushing;
    flushing = flushing
      .then(() => outbox.markDelivered(batch))
      // The next event of a box (per-box ordering) becomes claimable only once its predecessor's row is no longer pending.
      .then(() => wake('all'))
      .catch((error: unknown) => log.error({ err: error, rows: batch.length }, 'could not record delivered rows; they will be sent again'))
      .finally(() => batch.forEach((row) => recording.delete(row.id)));
    return flushing;
  };
  const markDelivered = (row: Delivered) => {
    if (delivered.length === 0) setImmediate(flushDelivered);
    recording.add(row.id);
    delivered.push(row);
  };

  /** Sinks this process saw fail since its last success there: their next success clears `failing_since`. */
  const failingSeen = new Set<string>();

  /**
   * Pause bookkeeping of one attempt's outcome: a delivery ends a run of failures (and a probe's
   * success resumes the sink); a failure may pause it. Returns whether the sink is paused now.
   */
  const trackFailures = async (sink: Sink, outcome: Outcome, trial: Trial, state: SinkState): Promise<boolean> => {
    if (outcome.kind === 'delivered') {
      if (trial === 'probe') await pauses.resume(sink.name, 'probe');
      else if (state.failing_since !== null || failingSeen.has(sink.name)) {
        failingSeen.delete(sink.name);
        if (await sinkStates.succeeded(sink.name, clock.now() - tuning.recoverAfterMs)) {
          // Recovered: what was backed off while it failed is due now (as a resume does), not after the rest of its wait.
          await outbox.makeDue(sink.name, clock.now());
          log.info({ sink: sink.name }, 'the sink delivers again after failing: its waiting work is due now');
        }
      }
      return false;
    }
    if (!outcome.error) return state.paused_at !== null;
    const now = clock.now();
    failingSeen.add(sink.name);
    const failing = await sinkStates.failed(sink.name, now);
    const pauseAfterMs = sink.pauseAfterMs ?? 0;
    if (pauseAfterMs <= 0) return failing.paused_at !== null;
    if (failing.paused_at !== null) return true;
    if (failing.failing_since === null || now - failing.failing_since < pauseAfterMs) return false;
    await pauses.pauseForFailures(sink.name, { failingSince: failing.failing_since, lastError: outcome.error.summary });
    return true;
  };

  /**
   * What the outcome of an event's attempts means for the sink (pause bookkeeping, metrics and
   * logs, the dead letter's operator event), as a verdict the caller writes down: to a claimed
   * row, or as an outbox row of a log entry.
   */
  const judge = async (sink: Sink, work: Work, outcome: Outcome, trial: Trial, state: SinkState): Promise<Verdict> => {
    const labels = { sink: sink.name };
    // A skipped event, or one its transform fails on, tells nothing of the sink: no pause bookkeeping, no waiting.
    const aboutSink = outcome.kind === 'delivered' ? !outcome.skipped : !(outcome.error instanceof EventFailure);
    const paused = aboutSink && (await trackFailures(sink, outcome, trial, state));
    const now = clock.now();
    const context = { sink: sink.name, eventId: work.eventId, outboxId: work.rowId, attempts: outcome.attempts, ...logFieldsOf(work.traceparent) };
    if (outcome.kind !== 'delivered' && outcome.error && paused) {
      // A paused sink's work waits: not dead-lettered, and its attempts while paused do not count.
      metrics.sinkDeliveries.inc({ ...labels, outcome: 'retried' }, outcome.failures);
      log.info({ ...context, error: outcome.error.summary }, 'delivery failed while the sink is paused; the event waits');
      return { kind: 'wait', attempts: work.attempts, lastError: outcome.error.summary, nextAttemptAt: now, now };
    }
    const dead = outcome.kind === 'dead';
    metrics.sinkDeliveries.inc({ ...labels, outcome: 'retried' }, outcome.failures - (dead ? 1 : 0));
    if (outcome.kind === 'delivered') {
      metrics.sinkDeliveries.inc({ ...labels, outcome: outcome.skipped ? 'skipped' : 'delivered' });
      return { kind: 'delivered', attempts: outcome.attempts, lastError: outcome.error?.summary ?? null, now };
    }
    if (outcome.kind === 'dead') return { kind: 'dead', attempts: outcome.attempts, lastError: outcome.error.summary, now };
    if (!outcome.error) return { kind: 'undone' };
    log.info({ ...context, error: outcome.error.summary, nextAttemptAt: new Date(outcome.nextAttemptAt).toISOString() }, 'delivery failed; retry scheduled');
    return { kind: 'wait', attempts: outcome.attempts, lastError: outcome.error.summary, nextAttemptAt: outcome.nextAttemptAt, now };
  };

  /** A dead letter is counted, logged and announced once it is written down. */
  const deadLettered = async (sink: Sink, work: Work, verdict: Extract<Verdict, { kind: 'dead' }>): Promise<void> => {
    metrics.sinkDeliveries.inc({ sink: sink.name, outcome: 'dead_lettered' });
    log.warn(
      { sink: sink.name, eventId: work.eventId, outboxId: work.rowId, attempts: verdict.attempts, error: verdict.lastError, ...logFieldsOf(work.traceparent) },
      'delivery failed for good: dead letter',
    );
    // Operator events that fail are not announced again: that could loop.
    if (work.origin === 'operator') return;
    await deps.operatorEvents.announce({
      type: 'boxrelay.event.dead_lettered',
      subject: work.boxId ?? undefined,
      about: sink.name,
      data: { eventId: work.eventId, sink: sink.name, attempts: verdict.attempts, lastError: verdict.lastError },
    });
  };

  /** A claimed row's verdict, written to the row (while this process still holds it). */
  const settleRow = async (sink: Sink, row: ClaimedRow, verdict: Verdict): Promise<void> => {
    const { id } = row;
    switch (verdict.kind) {
      case 'delivered':
        return markDelivered({ id, attempts: verdict.attempts, lastError: verdict.lastError, now: verdict.now });
      case 'dead':
        // Another replica took the row over when this attempt outlived its lease: its outcome counts, not this one.
        if (await outbox.markDead({ id, owner, attempts: verdict.attempts, lastError: verdict.lastError, now: verdict.now })) {
          await deadLettered(sink, workOfRow(row), verdict);
        }
        return;
      case 'undone':
        return outbox.release([id], owner);
      case 'wait':
        return outbox.scheduleRetry({ id, owner, attempts: verdict.attempts, lastError: verdict.lastError, now: verdict.now }, verdict.nextAttemptAt);
    }
  };

  /**
   * Tries a write that settles a log entry again until it holds (backing off up to the poll
   * interval), or gives STOPPED once the dispatcher stops: an entry left unsettled while its lane
   * goes on would hold its partition's cursor back (and its box's later events) until the process
   * restarts. The first try is made even while stopping: an attempt that ended is written down.
   */
  const untilStored = async <T>(what: string, write: () => Promise<T>, context: Record<string, unknown>): Promise<T | typeof STOPPED> => {
    for (let delayMs = 100; ; delayMs = Math.min(2 * delayMs, tuning.pollMs)) {
      try {
        return await write();
      } catch (error) {
        log.error({ err: error, ...context }, `could not ${what}; trying again`);
      }
      try {
        await sleep(delayMs, undefined, { signal: stopping.signal });
      } catch {
        return STOPPED;
      }
    }
  };

  /**
   * A log entry's verdict: delivered at its first attempt needs nothing (the cursor passes it); any
   * other outcome becomes an outbox row, written before the cursor may pass. Undone (a stop) writes
   * nothing, and the cursor stays before it.
   */
  const settleEntry = async (sink: Sink, entry: LogEntry, verdict: Verdict): Promise<EntryFate> => {
    if (verdict.kind === 'undone') return 'undone';
    if (verdict.kind === 'delivered' && verdict.attempts <= 1 && verdict.lastError === null) return 'delivered';
    const waits = verdict.kind === 'wait';
    const row = exceptionOf(sink, entry, {
      status: waits ? 'pending' : verdict.kind,
      attempts: verdict.attempts,
      lastError: verdict.lastError,
      nextAttemptAt: waits ? verdict.nextAttemptAt : verdict.now,
      now: verdict.now,
    });
    if ((await untilStored('write down the outcome of an event', () => outbox.addExceptions([row]), { sink: sink.name, eventId: entry.id })) === STOPPED) return 'undone';
    if (verdict.kind === 'dead') {
      // The dead letter is written down: a failed announcement must not send the event again.
      await deadLettered(sink, workOfEntry(entry), verdict).catch((error: unknown) =>
        log.error({ err: error, sink: sink.name, eventId: entry.id }, 'could not announce a dead letter'),
      );
    }
    return waits ? 'waiting' : verdict.kind;
  };

  /** Attempts one event on the sink; true in `changed` when that may have changed the sink's pause state. */
  const attempt = async (sink: Sink, work: Work, workMs: number, trial: Trial, state: SinkState): Promise<{ verdict: Verdict; changed: boolean }> => {
    const event = eventOf(work.eventId, work.payload, work.origin);
    /** Each attempt is a span in the trace of the delivery that stored the event. */
    const send = async (signal: AbortSignal): Promise<void | 'skipped'> => {
      // Off: no span name (a NATS subject) or attributes built per attempt for nothing.
      if (!deps.tracing.enabled) return sink.deliver(event, signal);
      const span = deps.tracing.child(sink.spanName?.(event) ?? sink.name, sink.spanKind ?? 'client', work.traceparent, {
        'boxrelay.sink': sink.name,
        'boxrelay.delivery_id': event.id,
        'boxrelay.event_type': event.type,
      });
      try {
        const delivered = await sink.deliver(event, signal, { traceparent: span.traceparent });
        span.end();
        return delivered;
      } catch (error) {
        span.end({ 'error.type': (error as { code?: string }).code ?? 'sink_error' }, error);
        throw error;
      }
    };
    const outcome = await attemptDelivery({
      send,
      sink,
      event,
      attempts: work.attempts,
      workMs,
      // A probe is one attempt: it tells whether the sink is back, not more.
      tuning: trial === 'probe' ? { ...tuning, quickRetries: 0 } : tuning,
      now: () => clock.now(),
      stopping: stopping.signal,
      cut: cut.signal,
      observe: (seconds) => metrics.sinkDeliveryDuration.observe({ sink: sink.name }, seconds),
    });
    const verdict = await judge(sink, work, outcome, trial, state);
    return { verdict, changed: trial === 'probe' || outcome.kind !== 'delivered' || state.failing_since !== null };
  };

  /** One claimed row tried and settled; true when that may have changed the sink's pause state. */
  const workRow = async (sink: Sink, row: ClaimedRow, workMs: number, trial: Trial, state: SinkState): Promise<boolean> => {
    if (row.payload === null) {
      // Pruned after the row was written (retention): nothing left to send.
      await outbox.markDead({ id: row.id, owner, attempts: row.attempts, lastError: 'event no longer stored', now: clock.now() });
      return false;
    }
    const { verdict, changed } = await attempt(sink, { ...workOfRow(row), payload: row.payload }, workMs, trial, state);
    await settleRow(sink, row, verdict);
    return changed;
  };

  const createLane = (sink: Sink) => {
    const leaseMs = tuning.leaseMs ?? leaseMsFor(sink.attemptTimeoutMs, tuning);
    const workMs = workMsFor(leaseMs, tuning);
    if (workMs < sink.attemptTimeoutMs) {
      log.warn(
        { sink: sink.name, leaseMs, attemptTimeoutMs: sink.attemptTimeoutMs },
        'the outbox lease is short for this sink: an attempt still running when its lease ends may be sent again by another replica',
      );
    }
    const ordered = sink.ordering === 'per-box';
    let busy = 0;
    let claiming = false;
    let wokenWhileClaiming = false;
    let wakeQueued = false;
    /** Outbox rows may be due: set by the poll, a due timer and wakes other than a commit; cleared when a claim finds fewer than it asked for. */
    let rowsMaybeDue = true;
    let dueTimer: NodeJS.Timeout | undefined;
    /** The poll asked for the partitions to be renewed. */
    let partitionsDue = false;
    /** The sink's pause state, shared by replicas: read again once per poll interval. */
    let state: SinkState | undefined;
    let stateReadAt = 0;
    /** Counts pauses and resumes told to this lane: a read or a claim under way across one is stale. */
    let stateChanges = 0;

    /** The log partitions this lane reads, and where their cursors may move. */
    const partitions = createLogPartitions();
    let cursorTimer: NodeJS.Timeout | undefined;
    let storingCursors: Promise<void> = Promise.resolve();
    /** Per-box order on the log: each box's last entry under way here, and how it ended. */
    const boxTails = new Map<string, Promise<EntryFate>>();
    const routed = (entry: LogEntry) => routedTo(entry.sinks, sink.name);
    /** Entries read and not yet looked at (a narrow lane takes a few of a read at a time); `readFull`: the read was a full batch. */
    let readAhead: LogEntry[] = [];
    let readFull = false;

    const readState = async (): Promise<SinkState> => {
      while (!state || performance.now() - stateReadAt >= tuning.pollMs) {
        const before = stateChanges;
        const read = await sinkStates.read(sink.name);
        // Read before a pause or a resume told meanwhile: read again rather than keep it.
        if (before !== stateChanges) continue;
        state = read;
        stateReadAt = performance.now();
      }
      return state;
    };
    const forgetState = () => {
      state = undefined;
      stateChanges++;
    };

    const hasRoom = () => running && !stopping.signal.aborted && busy < sink.concurrency && (sink.onUp === undefined || sink.up());

    /**
     * A wide lane (NATS) claims again only once a good part of it is free: claiming a few rows each
     * time an ack frees a slot costs nearly as much per claim as a hundred rows, and a backlog drains
     * by claims. The rows still in flight keep the sink busy meanwhile.
     */
    const minClaim = Math.min(tuning.batchSize, Math.ceil(sink.concurrency / 4));
    /** Rows to claim now; 0 while the lane waits for room. */
    const claimable = () => {
      const room = sink.concurrency - busy;
      return busy > 0 && room < minClaim ? 0 : Math.min(room, tuning.batchSize);
    };

    /** Runs one piece of work in a slot of the lane; stop() waits for it. */
    const occupy = (task: () => Promise<void>, context: Record<string, unknown>) => {
      busy++;
      const running = task()
        .catch((error: unknown) => log.error({ err: error, sink: sink.name, ...context }, 'could not settle a delivery; it will be sent again'))
        .finally(() => {
          busy--;
          inFlight.delete(running);
          wakeLane();
        });
      inFlight.add(running);
    };

    const startRow = (row: ClaimedRow, trial: Trial, current: SinkState) => {
      // Claimed again while still ours: the claim only renewed its lease.
      if (working.has(row.id) || recording.has(row.id)) return;
      working.add(row.id);
      occupy(
        () =>
          workRow(sink, row, workMs, trial, current)
            .then((stateChanged) => {
              if (stateChanged) forgetState();
            })
            .finally(() => working.delete(row.id)),
        { outboxId: row.id },
      );
    };

    /** Cursor moves are stored together, a few times a second, not per event. */
    const storeCursors = (): Promise<void> => {
      clearTimeout(cursorTimer);
      cursorTimer = undefined;
      storingCursors = storingCursors.then(async () => {
        const moved = partitions.moved();
        if (moved.length === 0) return;
        try {
          cursorsStoredAt = performance.now();
          const now = clock.now();
          // When a cursor passed an event is its delivery time in the event's status: to the second is enough.
          const mark = now - markedAt >= MARK_EVERY_MS;
          await outbox.advanceCursors({ sink: sink.name, owner, now, cursors: moved, mark });
          if (mark) markedAt = now;
          partitions.stored(moved);
        } catch (error) {
          log.error({ err: error, sink: sink.name }, 'could not store how far the sink has read the log; trying again');
        }
      });
      return storingCursors;
    };
    /** Stored soon after a move (a crash sends again only what settled since), but at most once per `cursorStoreMs`. */
    let cursorsStoredAt = -Infinity;
    let markedAt = -Infinity;
    const cursorMoved = () => {
      cursorTimer ??= setTimeout(() => void storeCursors(), Math.max(0, cursorsStoredAt + tuning.cursorStoreMs - performance.now())).unref();
    };

    /**
     * A log entry tried (after the entries of its box before it, with per-box order) and written
     * down. `before`: the run of its box's previous entry here; `held`: boxes with outbox rows of
     * the sink, read after `before` was taken.
     */
    const runEntry = async (
      entry: LogEntry,
      trial: Trial,
      current: SinkState,
      before: Promise<EntryFate> | undefined,
      held: Promise<ReadonlySet<string> | typeof STOPPED>,
    ): Promise<EntryFate> => {
      const context = { sink: sink.name, eventId: entry.id };
      const fate = await (async (): Promise<EntryFate> => {
        const previous = before ? await before : 'delivered';
        if (previous === 'undone' || stopping.signal.aborted) return 'undone';
        let behind = previous === 'waiting';
        if (ordered && entry.boxId !== null && !behind) {
          const boxes = await held;
          if (boxes === STOPPED) return 'undone';
          behind = boxes.has(entry.boxId);
        }
        if (behind) {
          // An earlier event of its box waits for a retry: this one waits behind it, as an outbox row.
          const now = clock.now();
          const row = exceptionOf(sink, entry, { status: 'pending', attempts: 0, lastError: null, nextAttemptAt: now, now });
          const written = await untilStored('write down an event that waits behind its box', () => outbox.addExceptions([row]), context);
          return written === STOPPED ? 'undone' : 'waiting';
        }
        // Failing to write its outcome down (pause bookkeeping), an attempt is made again: at least once.
        const tried = await untilStored('settle an attempt', () => attempt(sink, workOfEntry(entry), workMs, trial, current), context);
        if (tried === STOPPED) return 'undone';
        if (tried.changed) forgetState();
        return settleEntry(sink, entry, tried.verdict);
      })();
      if (fate !== 'undone') {
        partitions.settle(entry);
        cursorMoved();
      }
      return fate;
    };

    const startEntry = (entry: LogEntry, trial: Trial, current: SinkState, held: Promise<ReadonlySet<string> | typeof STOPPED>) => {
      const box = ordered ? entry.boxId : null;
      const run = runEntry(entry, trial, current, box === null ? undefined : boxTails.get(box), held);
      if (box !== null) {
        // An entry left undone (a stop; its writes are tried again until then) leaves the box's later entries to the next reader.
        const tail = run.catch((): EntryFate => 'undone');
        boxTails.set(box, tail);
        void tail.then(() => {
          if (boxTails.get(box) === tail) boxTails.delete(box);
        });
      }
      occupy(() => run.then(() => {}), { eventId: entry.id });
    };

    /**
     * Reads the log after the held partitions' cursors and starts up to `limit` of the entries
     * routed to this sink; false when the log has nothing more now.
     */
    const readLog = async (limit: number, trial: Trial, current: SinkState): Promise<boolean> => {
      if (readAhead.length === 0) {
        const after = partitions.readAfter();
        if (after === null) return false;
        const stateSeen = stateChanges;
        readAhead = await outbox.readLog(after, tuning.batchSize);
        readFull = readAhead.length === tuning.batchSize;
        // Paused (or resumed) while reading: the read may hold events accepted after the pause was
        // answered (in the worker thread the read is served later, by the main thread). They wait
        // here for a pass that has read the state again.
        if (stateSeen !== stateChanges) return false;
      }
      const { taken, examined } = partitions.take(readAhead, limit, routed);
      readAhead = readAhead.slice(examined);
      cursorMoved();
      const boxes = ordered ? [...new Set(taken.flatMap((entry) => (entry.boxId === null ? [] : [entry.boxId])))] : [];
      // Asked in a microtask, after every entry below took its box's previous run: a box whose run
      // ended before has its outbox row committed by then, and the answer shows it.
      const held = Promise.resolve().then(async () =>
        boxes.length === 0 ? new Set<string>() : untilStored('read which boxes wait', async () => new Set(await outbox.pendingBoxes(sink.name, boxes)), { sink: sink.name }),
      );
      for (const entry of taken) startEntry(entry, trial, current, held);
      return readAhead.length > 0 || readFull;
    };

    /** Takes and renews this lane's partitions of the log, giving back what is beyond its share once it is idle. */
    const holdPartitions = async (): Promise<void> => {
      const { held, share } = await outbox.acquireParts({
        sink: sink.name,
        owner,
        now: clock.now(),
        leaseMs,
        readerTtlMs: 2 * tuning.pollMs + tuning.leaseMarginMs / 10,
      });
      partitions.hold(held);
      // A partition taken over is read from its own cursor: what was read ahead may skip past it.
      readAhead = [];
      const surplus = partitions.idle().slice(0, Math.max(0, held.length - share));
      if (surplus.length === 0) return;
      await storeCursors();
      await outbox.releaseParts({ sink: sink.name, owner, parts: surplus });
      partitions.hold(held.filter((part) => !surplus.includes(part.part)));
    };

    const claim = (limit: number) => outbox.claim({ sink: sink.name, owner, now: clock.now(), leaseMs, limit, ordered });

    /**
     * A paused sink: nothing is claimed, but one event a minute as a probe when it was paused by its
     * failures: a due outbox row, or else the next event in the log.
     */
    const probe = async (current: SinkState): Promise<void> => {
      // The probe's time is by the lease clock (the database's on PostgreSQL): takeProbe decides, not this replica's clock.
      if (current.paused_by !== 'failures' || busy > 0) return;
      forgetState();
      if (!(await sinkStates.takeProbe(sink.name, clock.now()))) return;
      const rows = await claim(1);
      for (const row of rows) startRow(row, 'probe', current);
      if (rows.length === 0) await readLog(1, 'probe', current);
    };

    /** Claims due rows, then reads the log, while there is room; then sets a timer for the next due row. */
    const claimAndStart = async (): Promise<void> => {
      if (claiming) return void (wokenWhileClaiming = true);
      claiming = true;
      let finished!: () => void;
      const task = new Promise<void>((resolve) => (finished = resolve));
      inFlight.add(task);
      try {
        do {
          wokenWhileClaiming = false;
          if (partitionsDue) await renewPartitions();
          const current = await readState();
          if (current.paused_at !== null) {
            if (hasRoom()) await probe(current);
            continue;
          }
          const stateSeen = stateChanges;
          while (hasRoom()) {
            const limit = claimable();
            if (limit === 0) break;
            let more = false;
            if (rowsMaybeDue) {
              const rows = await claim(limit);
              if (stateSeen !== stateChanges) {
                // Paused (or resumed) while claiming: the rows go back (but those still under way here) and the state is read again.
                await outbox.release(rows.filter((row) => !working.has(row.id) && !recording.has(row.id)).map((row) => row.id), owner);
                wokenWhileClaiming = true;
                break;
              }
              rows.forEach((row) => startRow(row, 'normal', current));
              rowsMaybeDue = rows.length === limit;
              more = rowsMaybeDue;
            }
            const room = claimable();
            if (room > 0 && stateSeen === stateChanges) more = (await readLog(room, 'normal', current)) || more;
            if (!more) break;
            // A backlog would otherwise claim and start batch after batch in one turn: webhooks waiting
            // on the socket get their turn between batches.
            await new Promise((resolve) => setImmediate(resolve));
            // A long drain keeps its partitions' leases (another replica would take them over and send again).
            if (partitionsDue) await renewPartitions();
          }
        } while (wokenWhileClaiming && !stopping.signal.aborted);
        if (hasRoom() && claimable() > 0 && state?.paused_at == null) await armDueTimer();
      } catch (error) {
        log.error({ err: error, sink: sink.name }, 'could not claim fan-out work; retrying at the next poll');
      } finally {
        claiming = false;
        inFlight.delete(task);
        finished();
      }
      // A wake that came while the due time was being read is not lost.
      if (wokenWhileClaiming) wakeLane();
    };

    /** Retries due before the next poll are not left to wait for it. */
    const armDueTimer = async () => {
      const due = await outbox.nextDueAt(sink.name, owner);
      clearTimeout(dueTimer);
      if (due === null || stopping.signal.aborted) return;
      const wait = Math.max(0, due - clock.now());
      if (wait < tuning.pollMs) dueTimer = setTimeout(() => wakeLane('all'), wait).unref();
    };

    /** Coalesces the wakes of one turn (commits, completions) into one claim. */
    const wakeLane = (scope: WakeScope = 'log') => {
      if (scope === 'all') rowsMaybeDue = true;
      if (wakeQueued || !running || stopping.signal.aborted) return;
      wakeQueued = true;
      setImmediate(() => {
        wakeQueued = false;
        void claimAndStart();
      });
    };

    /**
     * The poll: partitions renewed (and shared) by the next claim round, never while a read of the
     * log is under way (its entries of a partition given back would be sent here and by the next
     * holder), then a look for rows and log entries.
     */
    const poll = () => {
      partitionsDue = true;
      wakeLane('all');
    };
    const renewPartitions = async (): Promise<void> => {
      partitionsDue = false;
      try {
        await holdPartitions();
      } catch (error) {
        log.error({ err: error, sink: sink.name }, 'could not take or renew the log partitions; trying again at the next poll');
      }
    };

    /** What this lane holds goes back: its cursors stored, its partitions released for another process. */
    const stop = async (): Promise<void> => {
      clearTimeout(dueTimer);
      await storeCursors();
      await outbox.releaseParts({ sink: sink.name, owner, parts: partitions.held() });
      partitions.hold([]);
    };

    sink.onUp?.(() => wakeLane('all'));
    return { sink, wakeLane, forgetState, poll, renewPartitions, stop };
  };

  const lanes = deps.sinks.map(createLane);
  const wake = (scope: WakeScope = 'all') => lanes.forEach((lane) => lane.wakeLane(scope));
  const poll = () => lanes.forEach((lane) => lane.poll());
  const served = deps.sinks.map((s) => s.name);

  /**
   * Says which sinks this replica serves, and sets aside work of a sink none serves any more. The
   * only process of a database (SQLite) knows at start that no one else serves it; replicas wait
   * for a grace period without a replica that does, so a rolling update that adds or removes a hook
   * leaves a peer's work alone.
   */
  const setAsideUnserved = async (): Promise<void> => {
    const now = clock.now();
    if (!deps.exclusive) await outbox.announceServed(served, now);
    const graceMs = deps.exclusive ? 0 : tuning.unservedGraceMs;
    for (const [sink, rows] of Object.entries(await outbox.setAsideUnserved({ configured: served, graceMs, now }))) {
      log.warn(
        { sink, rows },
        `pending work for sink ${sink}, which no replica serves${graceMs > 0 ? ` (none has for ${graceMs / 1000} s)` : ''}, is set aside as ` +
          `dead letters; if the sink is still wanted, run with a config that has it: boxrelay dead-letters retry --all --sink ${sink}`,
      );
    }
  };

  return {
    owner,
    /** Frees stale leases, announces its sinks and sets aside unserved work, then starts every lane and the poll. */
    async start(): Promise<void> {
      if (deps.exclusive) {
        const released = await outbox.releaseAll();
        if (released > 0) log.info({ rows: released }, 'released leases left by the previous run');
      }
      await setAsideUnserved();
      if (!deps.exclusive) {
        serveTimer = setInterval(
          () => void setAsideUnserved().catch((error: unknown) => log.error({ err: error }, 'could not announce the sinks served here; trying again')),
          serveIntervalMs(tuning.unservedGraceMs),
        ).unref();
      }
      // Each lane takes its partitions of the log before it reads.
      await Promise.all(lanes.map((lane) => lane.renewPartitions()));
      running = true;
      pollTimer = setInterval(poll, tuning.pollMs).unref();
      wake();
    },
    wake,
    sinkStateChanged(sink) {
      const lane = lanes.find((l) => l.sink.name === sink);
      lane?.forgetState();
      lane?.wakeLane('all');
    },
    /**
     * Claims and reads nothing more and ends in-process waits (those rows stay due); sink calls in
     * flight may finish within `graceMs`, then are cut. Every row ends delivered, scheduled, dead or
     * released, and every log entry delivered, written down or left after the stored cursor: none is
     * lost. Then the lanes store their cursors and give their partitions back.
     */
    async stop(graceMs: number): Promise<void> {
      stopping.abort();
      clearInterval(pollTimer);
      clearInterval(serveTimer);
      const cutTimer = setTimeout(() => cut.abort(), graceMs);
      // A claim that was under way may still start rows: they see the stop and are released.
      while (inFlight.size > 0) await Promise.all([...inFlight]);
      clearTimeout(cutTimer);
      await flushDelivered();
      await Promise.all(lanes.map((lane) => lane.stop()));
    },
  };
}
