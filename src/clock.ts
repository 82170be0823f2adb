import { setTimeout as sleep } from 'node:timers/promises';

/** Wall-clock source, injected so tests control time instead of sleeping. */
export interface Clock {
  /** Milliseconds since the Unix epoch. */
  now(): number;
}

export const systemClock: Clock = { now: () => Date.now() };

/** Waits `ms`, or rejects once `signal` aborts (tests move their clock instead of sleeping). */
export type Wait = (ms: number, signal?: AbortSignal) => Promise<void>;

export const realWait: Wait = (ms, signal) => sleep(ms, undefined, { signal });

/** Milliseconds in a day: retention is counted in days. */
export const DAY_MS = 86_400_000;
