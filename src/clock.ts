/** Wall-clock source, injected so tests control time instead of sleeping. */
export interface Clock {
  /** Milliseconds since the Unix epoch. */
  now(): number;
}

export const systemClock: Clock = { now: () => Date.now() };

/** Milliseconds in a day: retention is counted in days. */
export const DAY_MS = 86_400_000;
