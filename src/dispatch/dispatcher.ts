import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import type { Clock } from '../clock.js';
import { toCloudEvent } from '../events/cloudevent.js';
import type { Logger } from '../log.js';
import type { Metrics } from '../metrics/metrics.js';
import type { Sink } from '../sinks/sink.js';
import type { ClaimedRow, Outbox } from '../store/outbox.js';
import { attemptDelivery, type Outcome } from './attempt.js';
import { defaultTuning, leaseMsFor, workMsFor, type DispatchTuning } from './tuning.js';

export interface DispatcherDeps {
  outbox: Outbox;
  sinks: Sink[];
  clock: Clock;
  logger: Logger;
  metrics: Pick<Metrics, 'sinkDeliveries' | 'sinkDeliveryDuration'>;
  /** CloudEvents `source`. */
  source: string;
  /** Only this process serves the database (SQLite): leases left by a previous run are stale at start. */
  exclusive: boolean;
  tuning?: Partial<DispatchTuning>;
}

export type Dispatcher = ReturnType<typeof createDispatcher>;

/**
 * Moves committed outbox rows to the sinks. Each sink has its own lane (claims, concurrency, timers),
 * so a slow or dead hook never delays NATS or another hook. Rows are leased while worked on; a
 * process that dies leaves leases that expire, so the work is never lost, only delayed.
 */
export function createDispatcher(deps: DispatcherDeps) {
  const { outbox, clock, metrics } = deps;
  const tuning: DispatchTuning = { ...defaultTuning, ...deps.tuning };
  const log = deps.logger.child({ part: 'dispatch' });
  const owner = `${hostname()}:${process.pid}:${randomUUID().slice(0, 8)}`;
  const stopping = new AbortController();
  const cut = new AbortController();
  /** Deliveries and claims under way; stop() waits for all of them. */
  const inFlight = new Set<Promise<void>>();
  let pollTimer: NodeJS.Timeout | undefined;
  /** Nothing is claimed before start() has set aside and released what it must. */
  let running = false;

  /** Delivered rows are removed in batches: one statement for the acks that arrive together. */
  let delivered: number[] = [];
  let flushing: Promise<void> = Promise.resolve();
  const flushDelivered = (): Promise<void> => {
    const batch = delivered;
    delivered = [];
    if (batch.length === 0) return flushing;
    flushing = flushing
      .then(() => outbox.removeDelivered(batch))
      .catch((error: unknown) => log.error({ err: error, rows: batch.length }, 'could not remove delivered rows; they will be sent again'));
    return flushing;
  };
  const removeDelivered = (id: number) => {
    if (delivered.length === 0) setImmediate(flushDelivered);
    delivered.push(id);
  };

  const settle = async (sink: Sink, row: ClaimedRow, outcome: Outcome): Promise<void> => {
    const labels = { sink: sink.name };
    const dead = outcome.kind === 'dead';
    metrics.sinkDeliveries.inc({ ...labels, outcome: 'retried' }, outcome.failures - (dead ? 1 : 0));
    if (outcome.kind === 'delivered') {
      metrics.sinkDeliveries.inc({ ...labels, outcome: 'delivered' });
      return removeDelivered(row.id);
    }
    const now = clock.now();
    const context = { sink: sink.name, eventId: row.deliveryId, outboxId: row.id, attempts: outcome.attempts };
    if (outcome.kind === 'dead') {
      metrics.sinkDeliveries.inc({ ...labels, outcome: 'dead_lettered' });
      log.warn({ ...context, error: outcome.error.summary }, 'delivery failed for good: dead letter');
      return outbox.markDead({ id: row.id, owner, attempts: outcome.attempts, lastError: outcome.error.summary, now });
    }
    if (!outcome.error) return outbox.release([row.id], owner);
    log.info({ ...context, error: outcome.error.summary, nextAttemptAt: new Date(outcome.nextAttemptAt).toISOString() }, 'delivery failed; retry scheduled');
    return outbox.scheduleRetry({ id: row.id, owner, attempts: outcome.attempts, lastError: outcome.error.summary, now }, outcome.nextAttemptAt);
  };

  const work = async (sink: Sink, row: ClaimedRow, workMs: number): Promise<void> => {
    if (row.payload === null) {
      // Pruned after the row was written (retention): nothing left to send.
      return outbox.markDead({ id: row.id, owner, attempts: row.attempts, lastError: 'event no longer stored', now: clock.now() });
    }
    const outcome = await attemptDelivery({
      sink,
      event: toCloudEvent(row.payload, deps.source, row.origin),
      attempts: row.attempts,
      workMs,
      tuning,
      now: () => clock.now(),
      stopping: stopping.signal,
      cut: cut.signal,
      observe: (seconds) => metrics.sinkDeliveryDuration.observe({ sink: sink.name }, seconds),
    });
    await settle(sink, row, outcome);
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
    let busy = 0;
    let pumping = false;
    let again = false;
    let kicked = false;
    let dueTimer: NodeJS.Timeout | undefined;

    const open = () => running && !stopping.signal.aborted && busy < sink.concurrency && (sink.onUp === undefined || sink.up());

    const start = (row: ClaimedRow) => {
      busy++;
      const task = work(sink, row, workMs)
        .catch((error: unknown) => log.error({ err: error, sink: sink.name, outboxId: row.id }, 'could not settle a delivery; its lease will expire'))
        .finally(() => {
          busy--;
          inFlight.delete(task);
          kick();
        });
      inFlight.add(task);
    };

    /** Claims while there is room and due work, then sets a timer for the next due row. */
    const pump = async (): Promise<void> => {
      if (pumping) return void (again = true);
      pumping = true;
      let finished!: () => void;
      const task = new Promise<void>((resolve) => (finished = resolve));
      inFlight.add(task);
      try {
        do {
          again = false;
          while (open()) {
            const limit = Math.min(sink.concurrency - busy, tuning.batchSize);
            const rows = await outbox.claim({ sink: sink.name, owner, now: clock.now(), leaseMs, limit });
            rows.forEach(start);
            if (rows.length < limit) break;
          }
        } while (again && !stopping.signal.aborted);
        if (open()) await armDueTimer();
      } catch (error) {
        log.error({ err: error, sink: sink.name }, 'could not claim fan-out work; retrying at the next poll');
      } finally {
        pumping = false;
        inFlight.delete(task);
        finished();
      }
      // A wake that came while the due time was being read is not lost.
      if (again) kick();
    };

    /** Retries due before the next poll are not left to wait for it. */
    const armDueTimer = async () => {
      const due = await outbox.nextDueAt(sink.name, owner);
      clearTimeout(dueTimer);
      if (due === null || stopping.signal.aborted) return;
      const wait = Math.max(0, due - clock.now());
      if (wait < tuning.pollMs) dueTimer = setTimeout(kick, wait).unref();
    };

    /** Coalesces the wakes of one turn (commits, completions) into one pump. */
    const kick = () => {
      if (kicked || !running || stopping.signal.aborted) return;
      kicked = true;
      setImmediate(() => {
        kicked = false;
        void pump();
      });
    };

    sink.onUp?.(kick);
    return { sink, kick, stop: () => clearTimeout(dueTimer) };
  };

  const lanes = deps.sinks.map(createLane);
  const wake = () => lanes.forEach((lane) => lane.kick());

  return {
    owner,
    /** Sets aside work of removed sinks, frees stale leases, then starts every lane and the poll. */
    async start(): Promise<void> {
      const now = clock.now();
      for (const [sink, rows] of Object.entries(await outbox.setAside(deps.sinks.map((s) => s.name), now))) {
        // Also what a replica started with an older config than its peers does to a new sink's work.
        log.warn(
          { sink, rows },
          `pending work for sink ${sink}, not configured here, is set aside as dead letters; if the sink is still wanted ` +
            `(another replica or a newer config has it), run with that config: boxrelay dead-letters retry --all --sink ${sink}`,
        );
      }
      if (deps.exclusive) {
        const released = await outbox.releaseAll();
        if (released > 0) log.info({ rows: released }, 'released leases left by the previous run');
      }
      running = true;
      pollTimer = setInterval(wake, tuning.pollMs).unref();
      wake();
    },
    /** After a commit of new work, a dead letter retry or a replay. */
    wake,
    /**
     * Claims nothing more and ends in-process waits (those rows stay due); sink calls in flight may
     * finish within `graceMs`, then are cut. Every row ends delivered (deleted), scheduled, dead or
     * released: none is lost.
     */
    async stop(graceMs: number): Promise<void> {
      stopping.abort();
      clearInterval(pollTimer);
      lanes.forEach((lane) => lane.stop());
      const cutTimer = setTimeout(() => cut.abort(), graceMs);
      // A claim that was under way may still start rows: they see the stop and are released.
      while (inFlight.size > 0) await Promise.all([...inFlight]);
      clearTimeout(cutTimer);
      await flushDelivered();
    },
  };
}
