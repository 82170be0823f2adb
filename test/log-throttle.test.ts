// The one throttle of repeated failures in the log: by reason (the buses' and the secrets file's
// loops) and by key over time (hook filters), with what was not logged counted.
import { describe, expect, it } from 'vitest';
import { oncePerReason, throttledLog } from '../src/log.js';
import { ManualClock } from './support/clock.js';

describe('throttledLog', () => {
  it('logs a failure once per reason, a new reason at once, and the same reason again after clear()', () => {
    const lines: string[] = [];
    const report = oncePerReason((reason: string) => lines.push(reason));
    for (const reason of ['refused', 'refused', 'timeout', 'timeout', 'refused']) report(reason);
    expect(lines).toEqual(['refused', 'timeout', 'refused']);
    report('refused');
    report.clear();
    report('refused');
    expect(lines).toEqual(['refused', 'timeout', 'refused', 'refused']);
  });

  it('by key and time: each key at most once per period, with how many it did not log', () => {
    const clock = new ManualClock();
    const lines: [string, number][] = [];
    const report = throttledLog((key: string, unlogged) => lines.push([key, unlogged]), { keyOf: (key) => key, every: { clock, ms: 60_000 } });
    report('a');
    report('a');
    report('b');
    clock.advance(59_999);
    report('a');
    expect(lines).toEqual([['a', 0], ['b', 0]]);
    clock.advance(1);
    // Another key logged first forgets nothing that was left out.
    report('b');
    report('a');
    expect(lines).toEqual([['a', 0], ['b', 0], ['b', 0], ['a', 2]]);
  });
});
