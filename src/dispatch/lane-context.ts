import type { Clock } from '../clock.js';
import type { Logger } from '../log.js';
import type { Sink } from '../sinks/sink.js';
import type { FanoutStore } from '../store/fanout-store.js';
import type { AttemptGate } from './attempt.js';
import type { Judge } from './judge.js';
import type { TryEvent } from './try-event.js';
import type { DispatchTuning } from './tuning.js';
import type { UntilStored } from './until-stored.js';
import type { Trial } from './work.js';

/** Until when (by this process's clock) the lease of a piece of work runs; null once it is another's. */
export type LeaseUntil = () => number | null;

/** What a sink's log lane and exceptions lane share with the scheduler that runs them. */
export interface LaneContext {
  sink: Sink;
  /** Names this process's leases. */
  owner: string;
  store: FanoutStore;
  clock: Clock;
  tuning: DispatchTuning;
  log: Logger;
  /** How long the attempts of one event may run here (quick retries beyond it are scheduled in the database). */
  workMs: number;
  /** The leases' length (renewed at each poll). */
  holdMs: number;
  tryEvent: TryEvent;
  judge: Judge;
  untilStored: UntilStored;
  stopping: AbortSignal;
  /** Runs one piece of work in a slot of the lane; the dispatcher's stop waits for it. */
  occupy(task: () => Promise<void>, context: Record<string, unknown>): void;
  /** The sink's pause state may have changed: read it again before the next claim. */
  forgetState(): void;
  /** A piece of work wrote or settled an outbox row of the sink: when the next is due is read again. */
  rowsWritten(): void;
  /** Counts pauses and resumes told to the lane: a read or a claim under way across one is stale. */
  stateVersion(): number;
  /**
   * What each attempt of a piece of work asks before it starts: `admit` says `go` once the pause
   * state the lane has taken and acknowledged lets it, and the lane's lease and the work's run
   * (renewed first when either ran out by this process's clock); `now` checks the same, without
   * waiting, as the work leaves.
   */
  gate(trial: Trial, leaseUntil: LeaseUntil): AttemptGate;
}
