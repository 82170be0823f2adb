import { describe, expect, it } from 'vitest';
import { createLogPartitions } from '../src/dispatch/log-partitions.js';
import type { LogEntry } from '../src/store/log/read-log.js';

const entry = (seq: number, part: number, sinks = 'h'): LogEntry => ({
  seq,
  part,
  id: `evt_${seq}`,
  sinks,
  boxId: `bx_${part}`,
  payload: '{}',
  origin: null,
  traceparent: null,
});

/** A lane's bookkeeping of the log: a cursor never passes an entry that is not settled. */
describe('log partitions', () => {
  it('moves each cursor only over settled entries, and over what was seen when nothing is under way', () => {
    const parts = createLogPartitions();
    parts.hold([
      { part: 0, seq: 0, epoch: 1 },
      { part: 1, seq: 0, epoch: 1 },
    ]);
    // The read saw the log up to 4 (3, of partition 0, was routed elsewhere and not read).
    const { taken } = parts.take([entry(1, 0), entry(2, 1), entry(4, 1)], 10, { seq: 4 });
    expect(taken.map((e) => e.seq)).toEqual([1, 2, 4]);
    expect(parts.moved()).toEqual([]);

    parts.settle(entry(2, 1), 1);
    // Partition 1: 2 is settled, 4 is not; partition 0: 1 is not (3 was not routed here).
    expect(parts.moved()).toEqual([{ part: 1, seq: 2, epoch: 1 }]);
    parts.settle(entry(1, 0), 1);
    expect(parts.moved()).toEqual([
      { part: 0, seq: 4, epoch: 1 },
      { part: 1, seq: 2, epoch: 1 },
    ]);
    parts.stored(parts.moved());
    expect(parts.moved()).toEqual([]);
    expect(parts.idle()).toEqual([0]);

    parts.settle(entry(4, 1), 1);
    expect(parts.moved()).toEqual([{ part: 1, seq: 4, epoch: 1 }]);
    expect(parts.readAfter()).toEqual({ seq: 4 });
  });

  it('takes no more than asked, and reads again from where it stopped', () => {
    const parts = createLogPartitions();
    parts.hold([{ part: 0, seq: 0, epoch: 1 }]);
    expect(parts.take([entry(1, 0), entry(2, 0), entry(3, 0)], 2)).toMatchObject({ taken: [{ seq: 1 }, { seq: 2 }], examined: 2 });
    expect(parts.readAfter()).toEqual({ seq: 2 });
    // Read again from there: the first two are not taken twice.
    expect(parts.take([entry(1, 0), entry(2, 0), entry(3, 0)], 5).taken.map((e) => e.seq)).toEqual([3]);
  });

  it('reads a partition taken over from its stored cursor, and forgets one lost', () => {
    const parts = createLogPartitions();
    parts.hold([{ part: 0, seq: 0, epoch: 1 }]);
    parts.take([entry(5, 0), entry(6, 1)], 10);
    expect(parts.readAfter()).toEqual({ seq: 6 });
    // Partition 1 comes from another process with its cursor at 3: entries after it are read, not those of partition 0 again.
    parts.hold([
      { part: 0, seq: 0, epoch: 1 },
      { part: 1, seq: 3, epoch: 1 },
    ]);
    expect(parts.readAfter()).toEqual({ seq: 3 });
    expect(parts.take([entry(4, 1), entry(5, 0), entry(6, 1)], 10).taken.map((e) => e.seq)).toEqual([4, 6]);
    parts.hold([{ part: 1, seq: 3, epoch: 1 }]);
    expect(parts.held()).toEqual([1]);
    // Entries of a partition no longer held settle without moving anything.
    parts.settle(entry(5, 0), 1);
    expect(parts.moved().map((m) => m.part)).toEqual([]);
  });

  it('reads a partition taken anew (another epoch) from its stored cursor, and settles nothing of the old epoch in it', () => {
    const parts = createLogPartitions();
    parts.hold([{ part: 0, seq: 0, epoch: 1 }]);
    parts.take([entry(1, 0), entry(2, 0)], 10);
    // The lease ran out here; another holder moved the cursor to 1 and gave it back; taken again, as epoch 3.
    expect(parts.hold([{ part: 0, seq: 1, epoch: 3 }])).toEqual([0]);
    expect(parts.epochOf(0)).toBe(3);
    expect(parts.holds(entry(2, 0), 1)).toBe(false);
    expect(parts.take([entry(2, 0)], 10).taken.map((e) => e.seq)).toEqual([2]);
    // The run of the first epoch ends late: it moves nothing; the new run's settle does.
    parts.settle(entry(2, 0), 1);
    expect(parts.moved()).toEqual([]);
    parts.settle(entry(2, 0), 3);
    expect(parts.moved()).toEqual([{ part: 0, seq: 2, epoch: 3 }]);
  });

  it('counts the log as seen up to where the read saw it, once every entry of the read was looked at', () => {
    const parts = createLogPartitions();
    parts.hold([
      { part: 0, seq: 0, epoch: 1 },
      { part: 1, seq: 0, epoch: 1 },
    ]);
    // A narrow take: the read's end does not count while entries of it wait.
    parts.take([entry(3, 0), entry(7, 1)], 1, { seq: 20 });
    parts.settle(entry(3, 0), 1);
    expect(parts.moved()).toEqual([
      { part: 0, seq: 3, epoch: 1 },
      { part: 1, seq: 3, epoch: 1 },
    ]);
    parts.take([entry(7, 1)], 1, { seq: 20 });
    parts.settle(entry(7, 1), 1);
    expect(parts.moved()).toEqual([
      { part: 0, seq: 20, epoch: 1 },
      { part: 1, seq: 20, epoch: 1 },
    ]);
    // An empty read: the log up to its head was seen.
    parts.take([], 10, { seq: 25 });
    expect(parts.readAfter()).toEqual({ seq: 25 });
  });
});
