import { comparePositions, type Position } from '../store/log/position.js';
import type { FencedPart } from '../store/log/cursors.js';
import type { LogEntry } from '../store/log/read-log.js';

interface Slot {
  position: Position;
  done: boolean;
}

interface Partition {
  /** The epoch of this holder's take: an entry taken under another is not this holding's. */
  epoch: number;
  /** Done up to here: every routed entry at or before it is settled (delivered, or an outbox row). */
  cursor: Position;
  /** The cursor as last stored. */
  stored: Position;
  /** Read up to here: an entry at or before it is not taken again. */
  seen: Position;
  /** Entries taken and not yet settled, in log order, with "seen up to" marks between them. */
  slots: Slot[];
}

/**
 * One lane's view of the log partitions it holds (pure bookkeeping, no storage): which entries it
 * has taken, and how far each partition's cursor may move. A cursor moves over an entry only once
 * the entry is settled, so entries still under way (or left undone at a stop) are read again by
 * whoever holds the partition next.
 */
export interface LogPartitions {
  /**
   * The partitions held now, with their stored cursors: new ones are read from their cursor; lost
   * ones are forgotten, and so is one taken anew (another epoch: its lease ran out here meanwhile,
   * and another holder may have moved its cursor): it is read again from there. Returns the
   * partitions read afresh.
   */
  hold(held: FencedPart[]): number[];
  /** The epoch under which the partition is held now; undefined when it is not. */
  epochOf(part: number): number | undefined;
  /** The entry was taken here under `epoch`, is not settled, and its partition has been held since. */
  holds(entry: LogEntry, epoch: number): boolean;
  held(): number[];
  /** Where the next read starts after: the least `seen` of the held partitions; null when none is held. */
  readAfter(): Position | null;
  /**
   * The entries of a read to work on, at most `max`: those of held partitions not taken before;
   * everything up to the last entry examined counts as seen, and up to `end` once every entry was
   * (the read saw the log that far). `examined`: how many of `entries` were looked at (the rest are
   * for the next take).
   */
  take(entries: LogEntry[], max: number, end?: Position): { taken: LogEntry[]; examined: number };
  /** An entry taken under `epoch` is settled: its partition's cursor may move over it (not under another epoch). */
  settle(entry: LogEntry, epoch: number): void;
  /** Partitions whose cursor moved since it was last stored, with the new cursor; `stored` marks them stored. */
  moved(): FencedPart[];
  stored(parts: FencedPart[]): void;
  /** Held partitions with nothing under way: they can be given back as they are stored. */
  idle(): number[];
}

const later = (a: Position, b: Position) => comparePositions(a, b) > 0;

export function createLogPartitions(): LogPartitions {
  const parts = new Map<number, Partition>();

  const advance = (partition: Partition) => {
    while (partition.slots[0]?.done) partition.cursor = (partition.slots.shift() as Slot).position;
  };

  return {
    hold(held) {
      const keep = new Set(held.map((h) => h.part));
      const fresh: number[] = [];
      for (const part of [...parts.keys()]) if (!keep.has(part)) parts.delete(part);
      for (const { part, seq, epoch } of held) {
        const known = parts.get(part);
        if (known && known.epoch === epoch) continue;
        const position = { seq };
        parts.set(part, { epoch, cursor: position, stored: position, seen: position, slots: [] });
        fresh.push(part);
      }
      return fresh;
    },
    held: () => [...parts.keys()],
    epochOf: (part) => parts.get(part)?.epoch,
    holds(entry, epoch) {
      const partition = parts.get(entry.part);
      return partition?.epoch === epoch && partition.slots.some((slot) => !slot.done && slot.position.seq === entry.seq);
    },
    readAfter() {
      let least: Position | null = null;
      for (const { seen } of parts.values()) if (least === null || later(least, seen)) least = seen;
      return least;
    },
    take(entries, max, end) {
      const taken: LogEntry[] = [];
      let last: Position | undefined;
      let examined = 0;
      for (const entry of entries) {
        if (taken.length === max) break;
        examined++;
        last = entry;
        const partition = parts.get(entry.part);
        if (!partition || !later(entry, partition.seen)) continue;
        partition.seen = { seq: entry.seq };
        partition.slots.push({ position: partition.seen, done: false });
        taken.push(entry);
      }
      if (end !== undefined && examined === entries.length && (last === undefined || later(end, last))) last = end;
      if (last !== undefined) {
        const seenUpTo = { seq: last.seq };
        for (const partition of parts.values()) {
          if (!later(seenUpTo, partition.seen)) continue;
          partition.seen = seenUpTo;
          partition.slots.push({ position: seenUpTo, done: true });
        }
      }
      for (const partition of parts.values()) {
        // Marks between undone entries say the same as the last of them: keep one.
        partition.slots = partition.slots.filter((slot, i, all) => !slot.done || !all[i + 1]?.done);
        advance(partition);
      }
      return { taken, examined };
    },
    settle(entry, epoch) {
      const partition = parts.get(entry.part);
      if (partition?.epoch !== epoch) return;
      const slot = partition.slots.find((s) => s.position.seq === entry.seq);
      if (!partition || !slot) return;
      slot.done = true;
      advance(partition);
    },
    moved() {
      const moved: FencedPart[] = [];
      for (const [part, partition] of parts) if (later(partition.cursor, partition.stored)) moved.push({ part, epoch: partition.epoch, ...partition.cursor });
      return moved;
    },
    stored(stored) {
      for (const { part, seq, epoch } of stored) {
        const partition = parts.get(part);
        if (partition?.epoch === epoch && later({ seq }, partition.stored)) partition.stored = { seq };
      }
    },
    idle: () => [...parts].filter(([, p]) => p.slots.every((slot) => slot.done)).map(([part]) => part),
  };
}
