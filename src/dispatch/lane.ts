import type { Clock } from '../clock.js';
import type { Logger } from '../log.js';
import type { Sink } from '../sinks/sink.js';
import type { FanoutStore } from '../store/fanout-store.js';
import type { SinkState, SinkStates } from '../store/state/sink-state.js';
import type { DeliveredRows } from './delivered-rows.js';
import type { WakeScope } from './dispatcher.js';
import { createExceptionsLane } from './exceptions-lane.js';
import type { Admission } from './attempt.js';
import type { Judge } from './judge.js';
import type { LaneContext, LeaseUntil } from './lane-context.js';
import { createLogLane } from './log-lane.js';
import type { TryEvent } from './try-event.js';
import { leaseMsFor, workMsFor, type DispatchTuning } from './tuning.js';
import type { UntilStored } from './until-stored.js';
import type { Trial } from './work.js';

/** One sink's lane: its own claims, concurrency and timers, so a slow or dead sink never delays another. */
export interface Lane {
  sink: Sink;
  /** Coalesces the wakes of one turn (commits, completions) into one claim; `all`: outbox rows may be due too. */
  wake(scope?: WakeScope): void;
  /** The sink was paused or resumed: the lease is renewed and the state learnt at once. */
  forgetState(): void;
  /** The poll: leases renewed (and partitions shared) by the next round, then a look for work. */
  poll(): void;
  /** Takes (not while stopping) or renews this lane's lease, its log partitions and the leases of its rows. */
  renew(): Promise<void>;
  /** Gives back what the lane holds: its cursors stored, its partitions released, its lease ended. */
  stop(): Promise<void>;
}

export interface LaneDeps {
  owner: string;
  /** The fan-out's storage: the log and its exceptions. */
  store: FanoutStore;
  sinkStates: SinkStates;
  clock: Clock;
  tuning: DispatchTuning;
  log: Logger;
  tryEvent: TryEvent;
  judge: Judge;
  untilStored: UntilStored;
  delivered: DeliveredRows;
  stopping: AbortSignal;
  /** Work under way; the dispatcher's stop waits for all of it. */
  inFlight: Set<Promise<void>>;
  /** Nothing is claimed before the dispatcher has started. */
  running(): boolean;
}

/** How a lane schedules: claims due rows, then reads the log, while it has room; probes a sink paused by its failures. */
export function createLane(sink: Sink, deps: LaneDeps): Lane {
  const { store, sinkStates, clock, tuning, log, stopping, inFlight } = deps;
  const leaseMs = tuning.leaseMs ?? leaseMsFor(sink.attemptTimeoutMs, tuning);
  const workMs = workMsFor(leaseMs, tuning);
  const holdMs = Math.min(leaseMs, tuning.holdMs);
  if (workMs < sink.attemptTimeoutMs) {
    log.warn(
      { sink: sink.name, leaseMs, attemptTimeoutMs: sink.attemptTimeoutMs },
      'the outbox lease is short for this sink: an attempt still running when its lease ends may be sent again by another replica',
    );
  }
  let busy = 0;
  let claiming = false;
  let wokenWhileClaiming = false;
  let wakeQueued = false;
  /** Outbox rows may be due: set by the poll, a due timer and wakes other than a commit; cleared when a claim finds fewer than it asked for. */
  let rowsMaybeDue = true;
  /**
   * The sink's outbox rows may have changed since the due time was last read: a wake other than a
   * commit (the poll, an operator, a pause), or a row this lane wrote. A commit alone changes none,
   * so the read is not made again for each new delivery.
   */
  let dueMaybeMoved = true;
  let dueTimer: NodeJS.Timeout | undefined;
  /** The poll asked for the leases to be renewed. */
  let renewDue = false;
  /**
   * The sink's pause state as this lane has taken it: an attempt starts only by it, and only while
   * the lane's lease runs. Each renewal of the lease acknowledges the epoch of this state and learns
   * the sink's epoch now; a newer one (a pause or a resume anywhere) is read and acknowledged before
   * anything more starts. A pause is answered once every lane has acknowledged it or its lease ended
   * (`Pauses`), so no attempt starts after the answer, without a wait on any clock.
   */
  let state: SinkState | undefined;
  /** The newest epoch the lane has learnt of: a state older than it is not gone by. */
  let knownEpoch = 0;
  /** When the lane's lease runs out by this process's clock: from the time before its renewal was asked for. */
  let laneUntil = -Infinity;
  /** Counts the states taken: a read of the log or a claim under way across one is stale. */
  let stateChanges = 0;
  const stateCurrent = (): boolean => state !== undefined && state.epoch >= knownEpoch && clock.now() < laneUntil;
  /** Takes the state a renewal answered, with the lane's lease; true when its epoch is newer than the one acknowledged. */
  const take = (now: SinkState, until: number, acknowledged: number): boolean => {
    knownEpoch = Math.max(knownEpoch, now.epoch);
    laneUntil = Math.max(laneUntil, until);
    // Read before a newer state this lane took meanwhile (a renewal and an acknowledgement crossing): kept as it is.
    if (state !== undefined && now.epoch < state.epoch) return false;
    if (now.epoch !== state?.epoch) stateChanges++;
    state = now;
    return now.epoch > acknowledged;
  };
  /** Asks (a renewal) acknowledging the state this lane holds until the answer is no newer: a newer epoch is acknowledged by asking again. */
  const untilAcknowledged = async (ask: (acknowledged: number) => Promise<{ state: SinkState; until: number }>): Promise<void> => {
    for (let acknowledged = state?.epoch ?? 0; ; acknowledged = (state as SinkState).epoch) {
      const { state: now, until } = await ask(acknowledged);
      if (!take(now, until, acknowledged)) return;
    }
  };
  /** Renews the lane's lease and its partitions, which answers the sink's state (its run of failures changes without a new epoch). */
  const holdCurrent = () => untilAcknowledged((acknowledged) => logLane.hold(acknowledged));
  /** The same for the lane's lease alone: a change is acknowledged at once, even while a read of the log is under way. */
  const acknowledgeCurrent = () =>
    untilAcknowledged(async (acknowledged) => {
      const askedAt = clock.now();
      return { state: await store.log.acknowledge({ sink: sink.name, owner: deps.owner, now: askedAt, leaseMs: holdMs, seenEpoch: acknowledged }), until: askedAt + holdMs };
    });
  let acknowledging: Promise<void> | undefined;
  /** Told of a change (this process paused or resumed the sink): it is learnt and acknowledged at once, and the lane looks for work. */
  const forgetState = () => {
    // Not yet a reader: its first renewal learns the state.
    if (state !== undefined && !stopping.aborted) {
      acknowledging ??= acknowledgeCurrent()
        .catch((error: unknown) => log.warn({ err: error, sink: sink.name }, 'could not acknowledge a pause or a resume; the next renewal does'))
        .finally(() => (acknowledging = undefined));
    }
    renewDue = true;
    wake('all');
  };

  /**
   * Attempts waiting for the next renewal of the leases, asked for at once unless the last one
   * failed (then the poll's, not a renewal per attempt against a database that is down).
   */
  const renewWaiters: (() => void)[] = [];
  let renewFailed = false;
  const renewalsEnded = () => renewWaiters.splice(0).forEach((resolve) => resolve());
  stopping.addEventListener('abort', renewalsEnded, { once: true });
  const leasesRenewed = (): Promise<void> =>
    new Promise<void>((resolve) => {
      if (stopping.aborted) return resolve();
      renewWaiters.push(resolve);
      if (renewFailed) return;
      renewDue = true;
      wake();
    });

  /**
   * The gate, asked synchronously as the work leaves: the work's lease went to another holder, the
   * lane's lease or the work's ran out by this process's clock or a newer state is known and not yet
   * taken (`stale`), the sink is paused by the state taken, the lane stops; else `go`. `stopping`
   * comes last: work admitted before the stop that a sink completes as it drains still has to hold.
   */
  const admitNow = (trial: Trial, leaseUntil: LeaseUntil): Admission | 'stale' => {
    const until = leaseUntil();
    if (until === null) return 'lost';
    if (clock.now() >= until || !stateCurrent()) return 'stale';
    const current = state as SinkState;
    // A probe is the one attempt a sink paused by its failures makes.
    if (trial === 'probe' ? current.paused_by !== 'failures' : current.paused_at !== null) return 'paused';
    return stopping.aborted ? 'stopping' : 'go';
  };

  /** Before an attempt starts: nothing new while the lane stops; else the gate, after a renewal while it would answer `stale`. */
  const admit = async (trial: Trial, leaseUntil: LeaseUntil): Promise<Admission> => {
    for (;;) {
      if (stopping.aborted) return 'stopping';
      const admission = admitNow(trial, leaseUntil);
      if (admission !== 'stale') return admission;
      await leasesRenewed();
    }
  };

  const hasRoom = () => deps.running() && !stopping.aborted && busy < sink.concurrency && (sink.onUp === undefined || sink.up());

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

  const context: LaneContext = {
    sink,
    owner: deps.owner,
    store,
    clock,
    tuning,
    log,
    workMs,
    holdMs,
    tryEvent: deps.tryEvent,
    judge: deps.judge,
    untilStored: deps.untilStored,
    stopping,
    occupy(task, taskContext) {
      busy++;
      const running = task()
        .catch((error: unknown) => log.error({ err: error, sink: sink.name, ...taskContext }, 'could not settle a delivery; it will be sent again'))
        .finally(() => {
          busy--;
          inFlight.delete(running);
          wake();
        });
      inFlight.add(running);
    },
    forgetState,
    rowsWritten: () => void (dueMaybeMoved = true),
    stateVersion: () => stateChanges,
    gate: (trial, leaseUntil) => ({ admit: () => admit(trial, leaseUntil), now: () => admitNow(trial, leaseUntil) }),
  };
  const rows = createExceptionsLane(context, deps.delivered);
  const logLane = createLogLane(context);

  /**
   * A paused sink: nothing is claimed, but one event a minute as a probe when it was paused by its
   * failures: a due outbox row, or else the next event in the log.
   */
  const probe = async (current: SinkState): Promise<void> => {
    // The probe's time is by the lease clock (the database's on PostgreSQL): takeProbe decides, not this replica's clock.
    if (current.paused_by !== 'failures' || busy > 0) return;
    if (!(await sinkStates.takeProbe(sink.name, clock.now()))) return;
    const claimed = await rows.claim(1);
    for (const row of claimed) rows.start(row, 'probe', current);
    if (claimed.length === 0) await logLane.read(1, 'probe', current);
  };

  /** One renewal at a time (the poll's, a stop's while it drains): a call while one runs joins it. */
  let renewing: Promise<void> | undefined;
  const renewNow = async (): Promise<void> => {
    renewDue = false;
    try {
      await holdCurrent();
      await rows.renew();
      renewFailed = false;
    } catch (error) {
      renewFailed = true;
      log.error({ err: error, sink: sink.name }, 'could not take or renew the leases; trying again at the next poll');
    }
    renewalsEnded();
  };
  const renew = (): Promise<void> => (renewing ??= renewNow().finally(() => (renewing = undefined)));

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
        if (renewDue || !stateCurrent()) await renew();
        // Not renewed (the database is down): the next poll tries again.
        if (!stateCurrent()) break;
        const current = state as SinkState;
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
            const claimed = await rows.claim(limit);
            if (stateSeen !== stateChanges) {
              // Paused (or resumed) while claiming: the rows go back and the state is read again.
              await rows.giveBack(claimed);
              wokenWhileClaiming = true;
              break;
            }
            claimed.forEach((row) => rows.start(row, 'normal', current));
            rowsMaybeDue = claimed.length === limit;
            more = rowsMaybeDue;
          }
          const room = claimable();
          if (room > 0 && stateSeen === stateChanges) more = (await logLane.read(room, 'normal', current)) || more;
          if (!more) break;
          // A backlog would otherwise claim and start batch after batch in one turn: webhooks waiting
          // on the socket get their turn between batches.
          await new Promise((resolve) => setImmediate(resolve));
          // A long drain keeps its leases (another replica would take them over and send again).
          if (renewDue) await renew();
        }
      } while (wokenWhileClaiming && !stopping.aborted);
      if (dueMaybeMoved && hasRoom() && claimable() > 0 && state?.paused_at == null) await armDueTimer();
    } catch (error) {
      log.error({ err: error, sink: sink.name }, 'could not claim fan-out work; retrying at the next poll');
    } finally {
      claiming = false;
      inFlight.delete(task);
      finished();
    }
    // A wake that came while the due time was being read is not lost.
    if (wokenWhileClaiming) wake();
  };

  /** Retries due before the next poll are not left to wait for it. */
  const armDueTimer = async () => {
    // Cleared before the read: a row written while it is under way marks it again.
    dueMaybeMoved = false;
    const due = await rows.nextDueAt();
    clearTimeout(dueTimer);
    if (due === null || stopping.aborted) return;
    const wait = Math.max(0, due - clock.now());
    if (wait < tuning.pollMs) dueTimer = setTimeout(() => wake('all'), wait).unref();
  };

  const wake = (scope: WakeScope = 'log') => {
    if (scope === 'all') rowsMaybeDue = dueMaybeMoved = true;
    if (wakeQueued || !deps.running() || stopping.aborted) return;
    wakeQueued = true;
    setImmediate(() => {
      wakeQueued = false;
      void claimAndStart();
    });
  };

  sink.onUp?.(() => wake('all'));
  return {
    sink,
    wake,
    forgetState,
    /**
     * Leases renewed (and partitions shared) by the next claim round, never while a read of the log
     * is under way (its entries of a partition given back would be sent here and by the next holder).
     */
    poll() {
      renewDue = true;
      wake('all');
    },
    renew,
    async stop() {
      clearTimeout(dueTimer);
      await logLane.stop();
    },
  };
}
