import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import type { Clock } from '../clock.js';
import { toCloudEvent, type CloudEvent } from '../events/cloudevent.js';
import type { Logger } from '../log.js';
import type { SinkOutcome } from '../metrics/metrics.js';
import type { Sink } from '../sinks/sink.js';
import type { ClaimedRow, Delivered, Outbox } from '../store/outbox.js';
import type { SinkState, SinkStates } from '../store/sink-state.js';
import { attemptDelivery, type Outcome } from './attempt.js';
import type { OperatorEvents } from './operator-events.js';
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
  /** After a commit of new work, a dead letter retry, a replay or a resume. */
  wake(): void;
  /** A sink was paused or resumed: its lane reads the state again and looks for work. */
  sinkStateChanged(sink: string): void;
  stop(graceMs: number): Promise<void>;
}

/** A replica says which sinks it serves several times per grace period, so one late heartbeat never looks like none. */
const serveIntervalMs = (graceMs: number): number => Math.max(1000, Math.min(30_000, graceMs / 4));

/** How a claimed row is tried: normally, or as the one probe attempt of a sink paused by its failures. */
type Trial = 'normal' | 'probe';

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
      .then(wake)
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

  const settle = async (sink: Sink, row: ClaimedRow, event: CloudEvent, outcome: Outcome, trial: Trial, state: SinkState): Promise<void> => {
    const labels = { sink: sink.name };
    const paused = await trackFailures(sink, outcome, trial, state);
    const now = clock.now();
    const context = { sink: sink.name, eventId: row.deliveryId, outboxId: row.id, attempts: outcome.attempts, ...logFieldsOf(row.traceparent) };
    if (outcome.kind !== 'delivered' && outcome.error && paused) {
      // A paused sink's work waits: not dead-lettered, and its attempts while paused do not count.
      metrics.sinkDeliveries.inc({ ...labels, outcome: 'retried' }, outcome.failures);
      log.info({ ...context, error: outcome.error.summary }, 'delivery failed while the sink is paused; the event waits');
      return outbox.scheduleRetry({ id: row.id, owner, attempts: row.attempts, lastError: outcome.error.summary, now }, now);
    }
    const dead = outcome.kind === 'dead';
    metrics.sinkDeliveries.inc({ ...labels, outcome: 'retried' }, outcome.failures - (dead ? 1 : 0));
    if (outcome.kind === 'delivered') {
      metrics.sinkDeliveries.inc({ ...labels, outcome: 'delivered' });
      return markDelivered({ id: row.id, attempts: outcome.attempts, lastError: outcome.error?.summary ?? null, now });
    }
    if (outcome.kind === 'dead') {
      // Another replica took the row over when this attempt outlived its lease: its outcome counts, not this one.
      if (!(await outbox.markDead({ id: row.id, owner, attempts: outcome.attempts, lastError: outcome.error.summary, now }))) return;
      metrics.sinkDeliveries.inc({ ...labels, outcome: 'dead_lettered' });
      log.warn({ ...context, error: outcome.error.summary }, 'delivery failed for good: dead letter');
      // Operator events that fail are not announced again: that could loop.
      if (row.origin === 'operator') return;
      return deps.operatorEvents.announce({
        type: 'boxrelay.event.dead_lettered',
        subject: row.boxId ?? undefined,
        about: sink.name,
        data: { eventId: row.deliveryId, sink: sink.name, attempts: outcome.attempts, lastError: outcome.error.summary },
      });
    }
    if (!outcome.error) return outbox.release([row.id], owner);
    log.info({ ...context, error: outcome.error.summary, nextAttemptAt: new Date(outcome.nextAttemptAt).toISOString() }, 'delivery failed; retry scheduled');
    return outbox.scheduleRetry({ id: row.id, owner, attempts: outcome.attempts, lastError: outcome.error.summary, now }, outcome.nextAttemptAt);
  };

  /** One claimed row tried and settled; true when that may have changed the sink's pause state. */
  const work = async (sink: Sink, row: ClaimedRow, workMs: number, trial: Trial, state: SinkState): Promise<boolean> => {
    if (row.payload === null) {
      // Pruned after the row was written (retention): nothing left to send.
      await outbox.markDead({ id: row.id, owner, attempts: row.attempts, lastError: 'event no longer stored', now: clock.now() });
      return false;
    }
    const event = toCloudEvent(row.payload, deps.source, row.origin);
    /** Each attempt is a span in the trace of the delivery that stored the event. */
    const send = async (signal: AbortSignal): Promise<void> => {
      // Off: no span name (a NATS subject) or attributes built per attempt for nothing.
      if (!deps.tracing.enabled) return sink.deliver(event, signal);
      const span = deps.tracing.child(sink.spanName?.(event) ?? sink.name, sink.spanKind ?? 'client', row.traceparent, {
        'boxrelay.sink': sink.name,
        'boxrelay.delivery_id': event.id,
        'boxrelay.event_type': event.type,
      });
      try {
        await sink.deliver(event, signal, { traceparent: span.traceparent });
        span.end();
      } catch (error) {
        span.end({ 'error.type': (error as { code?: string }).code ?? 'sink_error' }, error);
        throw error;
      }
    };
    const outcome = await attemptDelivery({
      send,
      sink,
      event,
      attempts: row.attempts,
      workMs,
      // A probe is one attempt: it tells whether the sink is back, not more.
      tuning: trial === 'probe' ? { ...tuning, quickRetries: 0 } : tuning,
      now: () => clock.now(),
      stopping: stopping.signal,
      cut: cut.signal,
      observe: (seconds) => metrics.sinkDeliveryDuration.observe({ sink: sink.name }, seconds),
    });
    await settle(sink, row, event, outcome, trial, state);
    return trial === 'probe' || outcome.kind !== 'delivered' || state.failing_since !== null;
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
    let dueTimer: NodeJS.Timeout | undefined;
    /** The sink's pause state, shared by replicas: read again once per poll interval. */
    let state: SinkState | undefined;
    let stateReadAt = 0;
    /** Counts pauses and resumes told to this lane: a read or a claim under way across one is stale. */
    let stateChanges = 0;

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

    const startWork = (row: ClaimedRow, trial: Trial, current: SinkState) => {
      // Claimed again while still ours: the claim only renewed its lease.
      if (working.has(row.id) || recording.has(row.id)) return;
      working.add(row.id);
      busy++;
      const task = work(sink, row, workMs, trial, current)
        .then((stateChanged) => {
          if (stateChanged) forgetState();
        })
        .catch((error: unknown) => log.error({ err: error, sink: sink.name, outboxId: row.id }, 'could not settle a delivery; its lease will expire'))
        .finally(() => {
          working.delete(row.id);
          busy--;
          inFlight.delete(task);
          wakeLane();
        });
      inFlight.add(task);
    };

    const claim = (limit: number) => outbox.claim({ sink: sink.name, owner, now: clock.now(), leaseMs, limit, ordered });

    /** A paused sink: nothing is claimed, but one row a minute as a probe when it was paused by its failures. */
    const probe = async (current: SinkState): Promise<void> => {
      // The probe's time is by the lease clock (the database's on PostgreSQL): takeProbe decides, not this replica's clock.
      if (current.paused_by !== 'failures' || busy > 0) return;
      forgetState();
      if (!(await sinkStates.takeProbe(sink.name, clock.now()))) return;
      for (const row of await claim(1)) startWork(row, 'probe', current);
    };

    /** Claims while there is room and due work, then sets a timer for the next due row. */
    const claimAndStart = async (): Promise<void> => {
      if (claiming) return void (wokenWhileClaiming = true);
      claiming = true;
      let finished!: () => void;
      const task = new Promise<void>((resolve) => (finished = resolve));
      inFlight.add(task);
      try {
        do {
          wokenWhileClaiming = false;
          const current = await readState();
          if (current.paused_at !== null) {
            if (hasRoom()) await probe(current);
            continue;
          }
          const stateSeen = stateChanges;
          while (hasRoom()) {
            const limit = claimable();
            if (limit === 0) break;
            const rows = await claim(limit);
            if (stateSeen !== stateChanges) {
              // Paused (or resumed) while claiming: the rows go back (but those still under way here) and the state is read again.
              await outbox.release(rows.filter((row) => !working.has(row.id) && !recording.has(row.id)).map((row) => row.id), owner);
              wokenWhileClaiming = true;
              break;
            }
            rows.forEach((row) => startWork(row, 'normal', current));
            if (rows.length < limit) break;
            // A backlog would otherwise claim and start batch after batch in one turn: webhooks waiting
            // on the socket get their turn between batches.
            await new Promise((resolve) => setImmediate(resolve));
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
      if (wait < tuning.pollMs) dueTimer = setTimeout(wakeLane, wait).unref();
    };

    /** Coalesces the wakes of one turn (commits, completions) into one claim. */
    const wakeLane = () => {
      if (wakeQueued || !running || stopping.signal.aborted) return;
      wakeQueued = true;
      setImmediate(() => {
        wakeQueued = false;
        void claimAndStart();
      });
    };

    sink.onUp?.(wakeLane);
    return { sink, wakeLane, forgetState, stop: () => clearTimeout(dueTimer) };
  };

  const lanes = deps.sinks.map(createLane);
  const wake = () => lanes.forEach((lane) => lane.wakeLane());
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
      running = true;
      pollTimer = setInterval(wake, tuning.pollMs).unref();
      wake();
    },
    wake,
    sinkStateChanged(sink) {
      const lane = lanes.find((l) => l.sink.name === sink);
      lane?.forgetState();
      lane?.wakeLane();
    },
    /**
     * Claims nothing more and ends in-process waits (those rows stay due); sink calls in flight may
     * finish within `graceMs`, then are cut. Every row ends delivered, scheduled, dead or
     * released: none is lost.
     */
    async stop(graceMs: number): Promise<void> {
      stopping.abort();
      clearInterval(pollTimer);
      clearInterval(serveTimer);
      lanes.forEach((lane) => lane.stop());
      const cutTimer = setTimeout(() => cut.abort(), graceMs);
      // A claim that was under way may still start rows: they see the stop and are released.
      while (inFlight.size > 0) await Promise.all([...inFlight]);
      clearTimeout(cutTimer);
      await flushDelivered();
    },
  };
}
