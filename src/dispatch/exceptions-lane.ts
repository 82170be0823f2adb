import type { ClaimedRow } from '../store/exceptions/rows.js';
import type { SinkState } from '../store/state/sink-state.js';
import type { DeliveredRows } from './delivered-rows.js';
import type { LaneContext } from './lane-context.js';
import { workOfRow, type Trial, type Verdict } from './work.js';

/** A sink's outbox rows (retries, held and replayed work): claimed under a lease, tried, written back. */
export interface ExceptionsLane {
  claim(limit: number): Promise<ClaimedRow[]>;
  start(row: ClaimedRow, trial: Trial, state: SinkState): void;
  /** Rows claimed across a pause or a resume go back, but those still under way here. */
  giveBack(rows: ClaimedRow[]): Promise<void>;
  /** Keeps the leases of the rows this process works on. */
  renew(): Promise<void>;
  nextDueAt(): Promise<number | null>;
}

export function createExceptionsLane(ctx: LaneContext, delivered: DeliveredRows): ExceptionsLane {
  const { sink, owner, store, clock } = ctx;
  const ordered = sink.ordering === 'per-box';
  /** Rows being worked on here: a claim that finds one again (its lease ran out meanwhile) must not send it twice. */
  const working = new Set<number>();
  const ours = (row: ClaimedRow) => working.has(row.id) || delivered.recording(row.id);
  /** When each row's lease runs out by this process's clock (from the time before it was asked for); none once lost. */
  const heldUntil = new Map<number, number>();

  /** A claimed row's verdict, written to the row (while this process still holds it). */
  const settle = async (row: ClaimedRow, verdict: Verdict): Promise<void> => {
    const { id } = row;
    switch (verdict.kind) {
      case 'delivered':
        return delivered.mark({ id, attempts: verdict.attempts, lastError: verdict.lastError, now: verdict.now });
      case 'dead':
        // Another replica took the row over when this attempt outlived its lease: its outcome counts, not this one.
        if (await store.exceptions.markDead({ id, owner, attempts: verdict.attempts, lastError: verdict.lastError, now: verdict.now })) {
          await ctx.judge.deadLettered(sink, workOfRow(row), verdict);
        }
        return;
      case 'undone':
      case 'held':
        // Back to waiting as it was, for whoever claims it next (after the resume).
        return store.exceptions.release([id], owner);
      case 'lost':
        return;
      case 'wait':
        return store.exceptions.scheduleRetry({ id, owner, attempts: verdict.attempts, lastError: verdict.lastError, now: verdict.now }, verdict.nextAttemptAt);
    }
  };

  /** One claimed row tried and settled; true when that may have changed the sink's pause state. */
  const work = async (row: ClaimedRow, trial: Trial, state: SinkState): Promise<boolean> => {
    if (row.payload === null) {
      // Pruned after the row was written (retention): nothing left to send.
      await store.exceptions.markDead({ id: row.id, owner, attempts: row.attempts, lastError: 'event no longer stored', now: clock.now() });
      return false;
    }
    const leaseUntil = () => heldUntil.get(row.id) ?? null;
    const { verdict, changed } = await ctx.tryEvent(sink, { ...workOfRow(row), payload: row.payload }, ctx.workMs, trial, state, () => ctx.admit(trial, leaseUntil));
    await settle(row, verdict);
    return changed;
  };

  return {
    async claim(limit) {
      const askedAt = clock.now();
      const claimed = await store.exceptions.claim({ sink: sink.name, owner, now: askedAt, leaseMs: ctx.holdMs, limit, ordered });
      for (const row of claimed) heldUntil.set(row.id, askedAt + ctx.holdMs);
      return claimed;
    },
    start(row, trial, state) {
      // Claimed again while still ours: the claim only renewed its lease.
      if (ours(row)) return;
      working.add(row.id);
      ctx.occupy(
        () =>
          work(row, trial, state)
            .then((stateChanged) => {
              if (stateChanged) ctx.forgetState();
            })
            .finally(() => {
              working.delete(row.id);
              heldUntil.delete(row.id);
            }),
        { outboxId: row.id },
      );
    },
    giveBack(rows) {
      const ids = rows.filter((row) => !ours(row)).map((row) => row.id);
      for (const id of ids) heldUntil.delete(id);
      return store.exceptions.release(ids, owner);
    },
    async renew() {
      const askedAt = clock.now();
      const renewed = new Set(await store.exceptions.renewClaims({ sink: sink.name, owner, now: askedAt, leaseMs: ctx.holdMs }));
      // A row not renewed is another's now (claimed after its lease ran out here).
      for (const id of working) {
        if (renewed.has(id)) heldUntil.set(id, askedAt + ctx.holdMs);
        else heldUntil.delete(id);
      }
    },
    nextDueAt: () => store.exceptions.nextDueAt(sink.name, owner),
  };
}
