import { comparePositions, type Position } from '../store/log/position.js';
import type { HeldPart } from '../store/log/cursors.js';
import type { LogEntry } from '../store/log/read-log.js';

interface Slot {
  position: Position;
  done: boolean;
}

interface Partition {
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
   * ones are forgotten, and so is one whose stored cursor another holder moved past this one's (its
   * lease ran out here meanwhile): it is read again from there. Returns the partitions read afresh.
   */
  hold(held: HeldPart[]): number[];
  /** The entry was taken here, is not settled, and its partition has been held since. */
  holds(entry: LogEntry): boolean;
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
  /** A taken entry is settled: its partition's cursor may move over it. */
  settle(entry: LogEntry): void;
  /** Partitions whose cursor moved since it was last stored, with the new cursor; `stored` marks them stored. */
  moved(): HeldPart[];
  stored(parts: HeldPart[]): void;
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
      for (const { part, seq } of held) {
        const known = parts.get(part);
        if (known && !later({ seq }, known.cursor)) continue;
        const position = { seq };
        parts.set(part, { cursor: position, stored: position, seen: position, slots: [] });
        fresh.push(part);
      }
      return fresh;
    },
    held: () => [...parts.keys()],
    holds(entry) {
      return parts.get(entry.part)?.slots.some((slot) => !slot.done && slot.position.seq === entry.seq) ?? false;
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
    settle(entry) {
      const partition = parts.get(entry.part);
      const slot = partition?.slots.find((s) => s.position.seq === entry.seq);
      if (!partition || !slot) return;
      slot.done = true;
      advance(partition);
    },
    moved() {
      const moved: HeldPart[] = [];
      for (const [part, partition] of parts) if (later(partition.cursor, partition.stored)) moved.push({ part, ...partition.cursor });
      return moved;
    },
    stored(stored) {
      for (const { part, seq } of stored) {
        const partition = parts.get(part);
        if (partition && later({ seq }, partition.stored)) partition.stored = { seq };
      }
    },
    idle: () => [...parts].filter(([, p]) => p.slots.every((slot) => slot.done)).map(([part]) => part),
  };
}
