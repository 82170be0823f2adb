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

  /**
   * A claimed row's verdict, written to the row while this process still holds it as claimed; false
   * when it no longer does: reopened since (a resend: it is given back and sent again) or taken over.
   */
  const settle = async (row: ClaimedRow, verdict: Verdict): Promise<boolean> => {
    const { id, version } = row;
    switch (verdict.kind) {
      case 'delivered':
        delivered.mark({ id, version, attempts: verdict.attempts, lastError: verdict.lastError, now: verdict.now });
        return true;
      case 'dead':
        if (!(await store.exceptions.markDead({ id, owner, version, attempts: verdict.attempts, lastError: verdict.lastError, now: verdict.now }))) return false;
        await ctx.judge.deadLettered(sink, workOfRow(row), verdict);
        return true;
      case 'undone':
        await store.exceptions.release([id], owner);
        return true;
      case 'held':
        // Back to waiting as it was, for whoever claims it next (after the resume).
        await store.exceptions.release([id], owner);
        return true;
      case 'lost':
        // Taken over: its holder settles it.
        return false;
      case 'wait':
        return store.exceptions.scheduleRetry({ id, owner, version, attempts: verdict.attempts, lastError: verdict.lastError, now: verdict.now }, verdict.nextAttemptAt);
    }
  };

  /** One claimed row tried and settled: whether that may have changed the sink's pause state, and whether the row was still ours to settle. */
  const work = async (row: ClaimedRow, trial: Trial, state: SinkState): Promise<{ stateChanged: boolean; settled: boolean }> => {
    if (row.payload === null) {
      // Pruned after the row was written (retention): nothing left to send.
      const settled = await store.exceptions.markDead({ id: row.id, owner, version: row.version, attempts: row.attempts, lastError: 'event no longer stored', now: clock.now() });
      return { stateChanged: false, settled };
    }
    const leaseUntil = () => heldUntil.get(row.id) ?? null;
    const { verdict, changed } = await ctx.tryEvent(sink, { ...workOfRow(row), payload: row.payload }, ctx.workMs, trial, state, ctx.gate(trial, leaseUntil));
    return { stateChanged: changed, settled: await settle(row, verdict) };
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
            .finally(() => {
              working.delete(row.id);
              heldUntil.delete(row.id);
            })
            .then(async ({ stateChanged, settled }) => {
              ctx.rowsWritten();
              if (stateChanged) ctx.forgetState();
              // No longer ours as claimed (a claim made meanwhile may have leased it here again): due for a claim that sends it.
              if (!settled) await store.exceptions.release([row.id], owner);
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
