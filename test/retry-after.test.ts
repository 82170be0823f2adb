import { describe, expect, it } from 'vitest';
import { parseRetryAfter, waitRestOfRetryAfter } from '../src/retry-after.js';

describe('Retry-After', () => {
  const now = Date.parse('2026-11-21T10:00:00Z');

  it('reads delay-seconds and HTTP dates (RFC 9110), in ms from now', () => {
    expect(parseRetryAfter('120', now)).toBe(120_000);
    expect(parseRetryAfter(' 0 ', now)).toBe(0);
    expect(parseRetryAfter('Sat, 21 Nov 2026 10:01:30 GMT', now)).toBe(90_000);
    expect(parseRetryAfter(' Sat, 21 Nov 2026 10:01:30 GMT ', now)).toBe(90_000);
    // A date already past means "now", never a negative delay.
    expect(parseRetryAfter('Sat, 21 Nov 2026 09:00:00 GMT', now)).toBe(0);
  });

  it('ignores an absent, empty or unreadable value', () => {
    for (const value of [null, '', '   ', '-5', '1.5', 'soon', 'Someday']) expect(parseRetryAfter(value, now)).toBeUndefined();
  });

  it("waits only what a Retry-After asks beyond p-retry's next un-jittered backoff", async () => {
    const aborted = AbortSignal.abort();
    // Nothing left to wait resolves at once, even with an aborted signal.
    await expect(waitRestOfRetryAfter(undefined, { minTimeout: 500, factor: 2 }, 0, aborted)).resolves.toBeUndefined();
    await expect(waitRestOfRetryAfter(2000, { minTimeout: 500, factor: 2 }, 2, aborted)).resolves.toBeUndefined();
    await expect(waitRestOfRetryAfter(1000, { minTimeout: 500, factor: 2, maxTimeout: 10_000 }, 1, aborted)).resolves.toBeUndefined();
    // Beyond the floor (500 * 2^1 = 1000, or maxTimeout when lower), the rest is waited: here cut by the signal.
    await expect(waitRestOfRetryAfter(1001, { minTimeout: 500, factor: 2 }, 1, aborted)).rejects.toThrow(/abort/i);
    await expect(waitRestOfRetryAfter(2000, { minTimeout: 500, factor: 2, maxTimeout: 1500 }, 2, aborted)).rejects.toThrow(/abort/i);
  });
});
