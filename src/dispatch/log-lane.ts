import type { NewException } from '../store/exceptions/claims.js';
import type { LogEntry } from '../store/log/read-log.js';
import type { Position } from '../store/log/position.js';
import type { SinkState } from '../store/state/sink-state.js';
import type { LaneContext } from './lane-context.js';
import { createLogPartitions } from './log-partitions.js';
import { STOPPED } from './until-stored.js';
import { exceptionOf, workOfEntry, type EntryFate, type Trial, type Verdict } from './work.js';

/** How often a lane notes when its cursors moved (the delivery time an event's status shows is at most this late). */
const MARK_EVERY_MS = 1000;

/**
 * A sink's read of the delivery log: the partitions it holds, what it read ahead, per-box order
 * among the entries under way, and its cursors, which move only over settled entries.
 */
export interface LogLane {
  /** Reads the held partitions after their cursors and starts up to `limit` entries; false when the log has nothing more now. */
  read(limit: number, trial: Trial, state: SinkState): Promise<boolean>;
  /**
   * Renews the lane's lease and its partitions, acknowledging the pause epoch `seenEpoch`; takes
   * partitions up to this process's share (not while stopping) and gives back what is beyond it once
   * idle. Answers the sink's pause state now and until when the lane's lease runs by this process's clock.
   */
  hold(seenEpoch: number): Promise<{ state: SinkState; until: number }>;
  /** Stores the cursors, gives every partition back and leaves the sink's readers. */
  stop(): Promise<void>;
}

export function createLogLane(ctx: LaneContext): LogLane {
  const { sink, owner, store, clock, tuning, log } = ctx;
  const ordered = sink.ordering === 'per-box';
  const partitions = createLogPartitions();
  /** Per-box order on the log: each box's last entry under way here, the epoch it was taken in, and how it ended. */
  const boxTails = new Map<string, { epoch: number; fate: Promise<EntryFate> }>();
  /**
   * Entries read and not yet looked at (a narrow lane takes a few of a read at a time); `readEnd`:
   * how far the read saw the log; `readFull`: the read was a full batch.
   */
  let readAhead: LogEntry[] = [];
  let readEnd: Position | undefined;
  let readFull = false;

  let cursorTimer: NodeJS.Timeout | undefined;
  let storingCursors: Promise<void> = Promise.resolve();
  let cursorsStoredAt = -Infinity;
  let markedAt = -Infinity;
  /** When the held partitions' leases run out by this process's clock: from the time before they were asked for. */
  let partsHeldUntil = -Infinity;
  /** An entry's lease: its partition's, while this lane holds that partition under the epoch it was taken in. */
  const leaseOf = (entry: LogEntry, epoch: number) => () => (partitions.holds(entry, epoch) ? partsHeldUntil : null);
  /** Writes an entry's outbox row, refused (0) once its partition was taken since under a newer epoch. */
  const addRow = (row: NewException, entry: LogEntry, epoch: number) => store.exceptions.addExceptions([row], { part: entry.part, owner, epoch });

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
        await store.log.advanceCursors({ sink: sink.name, owner, now, cursors: moved, mark });
        if (mark) markedAt = now;
        partitions.stored(moved);
      } catch (error) {
        log.error({ err: error, sink: sink.name }, 'could not store how far the sink has read the log; trying again');
      }
    });
    return storingCursors;
  };
  /** Stored soon after a move (a crash sends again only what settled since), but at most once per `cursorStoreMs`. */
  const cursorMoved = () => {
    cursorTimer ??= setTimeout(() => void storeCursors(), Math.max(0, cursorsStoredAt + tuning.cursorStoreMs - performance.now())).unref();
  };

  /**
   * A log entry's verdict: delivered at its first attempt needs nothing (the cursor passes it); any
   * other outcome becomes an outbox row, written before the cursor may pass. Undone (a stop) writes
   * nothing, and the cursor stays before it.
   */
  const settle = async (entry: LogEntry, epoch: number, verdict: Verdict): Promise<EntryFate> => {
    // Its partition is another's now: that holder settles it.
    if (verdict.kind === 'undone' || verdict.kind === 'lost') return 'undone';
    if (verdict.kind === 'held') return waitAsRow(entry, epoch, verdict.now, 'write down an event held by a pause');
    if (verdict.kind === 'delivered' && verdict.attempts <= 1 && verdict.lastError === null) return 'delivered';
    const waits = verdict.kind === 'wait';
    const row = exceptionOf(sink, entry, {
      status: waits ? 'pending' : verdict.kind,
      attempts: verdict.attempts,
      lastError: verdict.lastError,
      nextAttemptAt: waits ? verdict.nextAttemptAt : verdict.now,
      now: verdict.now,
    });
    const written = await ctx.untilStored('write down the outcome of an event', () => addRow(row, entry, epoch), { sink: sink.name, eventId: entry.id });
    if (written === STOPPED) return 'undone';
    // Not written: a resend or a replay queued meanwhile sends the event again, and its row is its
    // status; or the partition was taken since (a stall, a stop), and its holder sends the event again.
    if (written === 0 && !partitions.holds(entry, epoch)) return 'undone';
    if (verdict.kind === 'dead' && written > 0) {
      // The dead letter is written down: a failed announcement must not send the event again.
      await ctx.judge.deadLettered(sink, workOfEntry(entry), verdict).catch((error: unknown) =>
        log.error({ err: error, sink: sink.name, eventId: entry.id }, 'could not announce a dead letter'),
      );
    }
    return waits ? 'waiting' : verdict.kind;
  };

  /** An entry not tried (paused, or behind its box) waits as a pending outbox row, due at once. */
  const waitAsRow = async (entry: LogEntry, epoch: number, now: number, what: string): Promise<EntryFate> => {
    const row = exceptionOf(sink, entry, { status: 'pending', attempts: 0, lastError: null, nextAttemptAt: now, now });
    const written = await ctx.untilStored(what, () => addRow(row, entry, epoch), { sink: sink.name, eventId: entry.id });
    return written === STOPPED || (written === 0 && !partitions.holds(entry, epoch)) ? 'undone' : 'waiting';
  };

  /**
   * A log entry tried (after the entries of its box before it, with per-box order) and written
   * down. `before`: the run of its box's previous entry here; `held`: boxes with outbox rows of
   * the sink, read after `before` was taken.
   */
  const run = async (
    entry: LogEntry,
    epoch: number,
    trial: Trial,
    state: SinkState,
    before: Promise<EntryFate> | undefined,
    held: Promise<ReadonlySet<string> | typeof STOPPED>,
  ): Promise<EntryFate> => {
    const context = { sink: sink.name, eventId: entry.id };
    const fate = await (async (): Promise<EntryFate> => {
      const previous = before ? await before : 'delivered';
      if (previous === 'undone' || ctx.stopping.aborted) return 'undone';
      let behind = previous === 'waiting';
      if (ordered && entry.boxId !== null && !behind) {
        const boxes = await held;
        if (boxes === STOPPED) return 'undone';
        behind = boxes.has(entry.boxId);
      }
      // An earlier event of its box waits for a retry: this one waits behind it, as an outbox row.
      if (behind) return waitAsRow(entry, epoch, clock.now(), 'write down an event that waits behind its box');
      // A failed attempt that could not be recorded is made again (its outcome counts only once recorded).
      const tried = await ctx.untilStored('settle an attempt', () => ctx.tryEvent(sink, { ...workOfEntry(entry), heldAs: { part: entry.part, owner, epoch } }, ctx.workMs, trial, state, ctx.gate(trial, leaseOf(entry, epoch))), context);
      if (tried === STOPPED) return 'undone';
      if (tried.changed) ctx.forgetState();
      return settle(entry, epoch, tried.verdict);
    })();
    if (fate !== 'undone') {
      partitions.settle(entry, epoch);
      cursorMoved();
    }
    // Any other fate wrote an outbox row.
    if (fate !== 'undone' && fate !== 'delivered') ctx.rowsWritten();
    return fate;
  };

  /**
   * What an entry taken under `epoch` waits for: the box's entry before it here. One of an earlier
   * holding (its partition was lost and taken back since, and read again from its cursor) still
   * keeps one request at a time for the box, but its ending undone (lost, not a stop) leaves this
   * holding's entries to go on: they are the reader that follows it.
   */
  const before = (box: string, epoch: number): Promise<EntryFate> | undefined => {
    const tail = boxTails.get(box);
    if (tail === undefined || tail.epoch === epoch) return tail?.fate;
    return tail.fate.then((fate) => (fate === 'undone' ? 'delivered' : fate));
  };

  const start = (entry: LogEntry, trial: Trial, state: SinkState, held: Promise<ReadonlySet<string> | typeof STOPPED>) => {
    const box = ordered ? entry.boxId : null;
    const epoch = partitions.epochOf(entry.part) as number;
    const running = run(entry, epoch, trial, state, box === null ? undefined : before(box, epoch), held);
    if (box !== null) {
      // An entry left undone (a stop, or its partition lost; its writes are tried again until then) leaves the box's later entries of its holding to the next reader.
      const tail = { epoch, fate: running.catch((): EntryFate => 'undone') };
      boxTails.set(box, tail);
      void tail.fate.then(() => {
        if (boxTails.get(box) === tail) boxTails.delete(box);
      });
    }
    ctx.occupy(() => running.then(() => {}), { eventId: entry.id });
  };

  return {
    async read(limit, trial, state) {
      if (readAhead.length === 0) {
        const after = partitions.readAfter();
        if (after === null) return false;
        const stateSeen = ctx.stateVersion();
        const page = await store.log.read({ sink: sink.name, parts: partitions.held(), after, limit: tuning.batchSize });
        readAhead = page.entries;
        readEnd = page.seenUpTo;
        readFull = readAhead.length === tuning.batchSize;
        // Paused (or resumed) while reading: the read may hold events accepted after the pause was
        // answered (in the worker thread the read is served later, by the main thread). They wait
        // here for a pass that has read the state again.
        if (stateSeen !== ctx.stateVersion()) return false;
      }
      const { taken, examined } = partitions.take(readAhead, limit, readEnd);
      readAhead = readAhead.slice(examined);
      cursorMoved();
      const boxes = ordered ? [...new Set(taken.flatMap((entry) => (entry.boxId === null ? [] : [entry.boxId])))] : [];
      // Asked in a microtask, after every entry below took its box's previous run: a box whose run
      // ended before has its outbox row committed by then, and the answer shows it.
      const held = Promise.resolve().then(async () =>
        boxes.length === 0
          ? new Set<string>()
          : ctx.untilStored('read which boxes wait', async () => new Set(await store.exceptions.pendingBoxes(sink.name, boxes)), { sink: sink.name }),
      );
      for (const entry of taken) start(entry, trial, state, held);
      return readAhead.length > 0 || readFull;
    },

    async hold(seenEpoch) {
      // Counted from before the request: a stall while it is under way eats into the lease.
      const askedAt = clock.now();
      const { held, share, state } = await store.log.acquireParts({
        sink: sink.name,
        owner,
        now: askedAt,
        leaseMs: ctx.holdMs,
        readerTtlMs: 2 * tuning.pollMs + tuning.leaseMarginMs / 10,
        seenEpoch,
        take: !ctx.stopping.aborted,
      });
      const until = askedAt + ctx.holdMs;
      partsHeldUntil = until;
      if (partitions.hold(held).length > 0) {
        // A partition taken over is read from its own cursor: what was read ahead may skip past it.
        readAhead = [];
        readEnd = undefined;
      }
      const surplus = partitions.idle().slice(0, Math.max(0, held.length - share));
      if (surplus.length > 0) {
        await storeCursors();
        await store.log.releaseParts({ sink: sink.name, owner, parts: surplus });
        partitions.hold(held.filter((part) => !surplus.includes(part.part)));
      }
      return { state, until };
    },

    async stop() {
      await storeCursors();
      await store.log.releaseParts({ sink: sink.name, owner, parts: partitions.held() });
      partitions.hold([]);
      // Never a reader (stopped before its first renewal): nothing to leave.
      if (partsHeldUntil === -Infinity) return;
      await store.log.leave({ sink: sink.name, owner }).catch((error: unknown) =>
        log.warn({ err: error, sink: sink.name }, 'could not leave the readers of the log; a pause waits for this lane until its lease ends'),
      );
    },
  };
}
