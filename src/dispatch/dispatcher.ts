import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import type { Clock } from '../clock.js';
import type { Logger } from '../log.js';
import type { SinkOutcome } from '../metrics/metrics.js';
import type { Sink } from '../sinks/sink.js';
import type { FanoutStore } from '../store/fanout-store.js';
import type { SinkStates } from '../store/state/sink-state.js';
import type { Tracing } from '../tracing/tracing.js';
import type { AttemptRecorder } from './attempt-recorder.js';
import { createDeliveredRows } from './delivered-rows.js';
import { createJudge } from './judge.js';
import { createLane } from './lane.js';
import type { OperatorEvents } from './operator-events.js';
import type { Pauses } from './pauses.js';
import { recentEvents, type AccountSources } from './recent-events.js';
import { createSinkHealth } from './sink-health.js';
import { createTryEvent } from './try-event.js';
import { defaultTuning, type DispatchTuning } from './tuning.js';
import { untilStoredBy } from './until-stored.js';

export interface DispatcherDeps {
  /** The fan-out's storage: the log and its exceptions. */
  store: FanoutStore;
  sinks: Sink[];
  clock: Clock;
  logger: Logger;
  metrics: DispatchMetrics;
  /** CloudEvents `source`. */
  source: string;
  /** The other accounts' CloudEvents `source`s (contract section 21). */
  accountSources?: AccountSources;
  /** Only this process serves the database (SQLite): leases left by a previous run are stale at start. */
  exclusive: boolean;
  sinkStates: SinkStates;
  pauses: Pauses;
  operatorEvents: OperatorEvents;
  tracing: Tracing;
  tuning?: Partial<DispatchTuning>;
  /** Writes each attempt down (contract section 16); none when attempts are not recorded. */
  attempts?: AttemptRecorder | undefined;
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
  /**
   * Resolves at a moment when no lane has a wake, a pass or an attempt under way: all that was asked
   * of the lanes so far is done (what a lane would have sent has been answered).
   */
  whenIdle(): Promise<void>;
  stop(graceMs: number): Promise<void>;
}

export type WakeScope = 'log' | 'all';

/** Steps per sink in one call of a set-aside pass (by default 10,000 rows): a stop waits for one call, seconds at most. */
const SET_ASIDE_STEPS_PER_CALL = 20;

/** A replica says which sinks it serves several times per grace period, so one late heartbeat never looks like none. */
const serveIntervalMs = (graceMs: number): number => Math.max(1000, Math.min(30_000, graceMs / 4));

/**
 * Moves stored work to the sinks. Each sink has its own lane (claims, concurrency, timers), so a
 * slow or dead sink never delays another: the lane reads the delivery log (log-lane.ts) and claims
 * the exceptions, outbox rows of retries and held or replayed work (exceptions-lane.ts). Work is
 * leased while under way; a process that dies leaves leases that expire, so nothing is lost, only
 * delayed.
 */
export function createDispatcher(deps: DispatcherDeps): Dispatcher {
  const { store, clock, metrics, sinkStates, pauses } = deps;
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

  const health = createSinkHealth({ sinkStates, pauses, makeDue: store.exceptions.makeDue, clock, recoverAfterMs: tuning.recoverAfterMs, log });
  const judge = createJudge({ health, metrics, operatorEvents: deps.operatorEvents, clock, log });
  const untilStored = untilStoredBy({ stopping: stopping.signal, maxDelayMs: tuning.pollMs, log });
  const tryEvent = createTryEvent({
    // An event's CloudEvent is built once for all its sinks, whose lanes read it within moments of each other.
    eventOf: recentEvents(deps.source, { accountSources: deps.accountSources }),
    judge,
    tracing: deps.tracing,
    tuning,
    clock,
    metrics,
    stopping: stopping.signal,
    cut: cut.signal,
    attempts: deps.attempts,
    untilStored,
  });
  const delivered = createDeliveredRows({
    markDelivered: store.exceptions.markDelivered,
    release: (ids) => store.exceptions.release(ids, owner),
    recorded: () => wake('all'),
    log,
  });

  const lanes = deps.sinks.map((sink) =>
    createLane(sink, { owner, store, sinkStates, clock, tuning, log, tryEvent, judge, untilStored, delivered, stopping: stopping.signal, inFlight, running: () => running }),
  );
  const wake = (scope: WakeScope = 'all') => lanes.forEach((lane) => lane.wake(scope));
  const whenIdle = async (): Promise<void> => {
    for (;;) {
      // A wake queued before this turn has started its pass (and put it in flight) by the next.
      await new Promise((resolve) => setImmediate(resolve));
      if (inFlight.size === 0) return;
      await Promise.all([...inFlight]);
    }
  };
  const poll = () => lanes.forEach((lane) => lane.poll());
  const served = deps.sinks.map((s) => s.name);

  /**
   * Sets aside work of a sink no replica serves any more. The only process of a database (SQLite)
   * knows at start that no one else serves it; replicas wait for a grace period without a replica
   * that does, so a rolling update that adds or removes a hook leaves a peer's work alone. It runs
   * beside the lanes and the receiver (a backlog of millions takes minutes), one pass at a time, in
   * calls of a few steps so a stop waits for one call only.
   */
  let setAsidePass: Promise<void> | undefined;
  const setAsideUnserved = (): void => {
    if (setAsidePass) return;
    const graceMs = deps.exclusive ? 0 : tuning.unservedGraceMs;
    const setAside: Record<string, number> = {};
    const failed = new Map<string, { step: string; message: string }>();
    setAsidePass = (async () => {
      for (let more = true; more && !stopping.signal.aborted; ) {
        const call = await store.exceptions.setAsideUnserved({ configured: served, graceMs, now: clock.now(), batchSize: tuning.setAsideBatch, maxSteps: SET_ASIDE_STEPS_PER_CALL });
        for (const [sink, rows] of Object.entries(call.setAside)) setAside[sink] = (setAside[sink] ?? 0) + rows;
        for (const { sink, step, message } of call.failed) failed.set(sink, { step, message });
        more = call.more;
      }
    })()
      .catch((error: unknown) => log.error({ err: error }, 'could not look for work of sinks no replica serves'))
      .finally(() => {
        setAsidePass = undefined;
        for (const [sink, { step, message }] of failed) {
          log.error({ sink, step }, `${message}; what was set aside stays so, and the rest is tried again ${deps.exclusive ? 'at the next start' : 'at the next pass'}`);
        }
        for (const [sink, rows] of Object.entries(setAside)) {
          log.warn(
            { sink, rows },
            `pending work for sink ${sink}, which no replica serves${graceMs > 0 ? ` (none has for ${graceMs / 1000} s)` : ''}, is set aside as ` +
              `dead letters; if the sink is still wanted, run with a config that has it: boxrelay dead-letters retry --all --sink ${sink}`,
          );
        }
      });
  };
  /** Says which sinks this replica serves (a heartbeat that other replicas' grace reads). */
  const announceServed = () => store.exceptions.announceServed(served, clock.now());

  return {
    owner,
    /** Frees stale leases or announces its sinks, starts every lane and the poll, then sets aside unserved work beside them. */
    async start(): Promise<void> {
      if (deps.exclusive) {
        const released = await store.exceptions.releaseAll();
        if (released > 0) log.info({ rows: released }, 'released leases left by the previous run');
      } else {
        await announceServed();
        serveTimer = setInterval(() => {
          announceServed().catch((error: unknown) => log.error({ err: error }, 'could not announce the sinks served here; trying again'));
          setAsideUnserved();
        }, serveIntervalMs(tuning.unservedGraceMs)).unref();
      }
      // Each lane takes its partitions of the log before it reads.
      await Promise.all(lanes.map((lane) => lane.renew()));
      running = true;
      pollTimer = setInterval(poll, tuning.pollMs).unref();
      wake();
      setAsideUnserved();
    },
    wake,
    sinkStateChanged(sink) {
      const lane = lanes.find((l) => l.sink.name === sink);
      lane?.forgetState();
      lane?.wake('all');
    },
    whenIdle,
    /**
     * Claims and reads nothing more and ends in-process waits (those rows stay due); sink calls in
     * flight may finish within `graceMs`, then are cut. Every row ends delivered, scheduled, dead or
     * released, and every log entry delivered, written down or left after the stored cursor: none is
     * lost. Then the lanes store their cursors and give their partitions back.
     */
    async stop(graceMs: number): Promise<void> {
      stopping.abort();
      for (const sink of deps.sinks) sink.drain?.();
      clearInterval(pollTimer);
      clearInterval(serveTimer);
      // What is still under way keeps its leases while it drains: another replica would send it again.
      const renewTimer = setInterval(() => lanes.forEach((lane) => void lane.renew()), tuning.pollMs).unref();
      await setAsidePass;
      const cutTimer = setTimeout(() => cut.abort(), graceMs);
      // A claim that was under way may still start rows: they see the stop and are released.
      await whenIdle();
      clearInterval(renewTimer);
      clearTimeout(cutTimer);
      await delivered.flush();
      await deps.attempts?.flush();
      await Promise.all(lanes.map((lane) => lane.stop()));
    },
  };
}
