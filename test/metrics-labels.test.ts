import { describe, expect, it } from 'vitest';
import { boxStateCounts, createTypeLabeler } from '../src/metrics/metrics.js';

describe('bounded label values', () => {
  it('keeps documented and new event types up to a cap, then folds the rest into other', () => {
    const label = createTypeLabeler(2);
    expect(label('box.error')).toBe('box.error');
    expect(label('account.updated')).toBe('account.updated');
    expect(label('bad type with spaces')).toBe('other');
    expect(label('billing.changed')).toBe('billing.changed');
    expect(label('third.new')).toBe('other');
    expect(label('account.updated')).toBe('account.updated');
    expect(label('box.ready')).toBe('box.ready');
  });

  it('folds box states into the documented states, other and unknown', () => {
    expect(boxStateCounts([
      { state: 'error', count: 2 },
      { state: 'hibernating', count: 1 },
      { state: 'melting', count: 1 },
      { state: null, count: 3 },
    ])).toEqual({ error: 2, other: 2, unknown: 3 });
  });
});
