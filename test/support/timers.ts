import { expect } from 'vitest';
import type { Timers } from '../../src/schedule.js';

/** Timers of a schedule, fired by hand; firing awaits the callback (a whole run). */
export class HandTimers implements Timers {
  planned: { callback: () => Promise<void>; ms: number; handle: number }[] = [];
  private next = 0;
  setTimeout(callback: () => Promise<void>, ms: number): number {
    const handle = ++this.next;
    this.planned.push({ callback, ms, handle });
    return handle;
  }
  clearTimeout(handle: unknown): void {
    this.planned = this.planned.filter((p) => p.handle !== handle);
  }
  /** Fires the one planned timer and returns its delay. */
  async fire(): Promise<number> {
    expect(this.planned).toHaveLength(1);
    const [timer] = this.planned.splice(0, 1);
    await timer!.callback();
    return timer!.ms;
  }
}
