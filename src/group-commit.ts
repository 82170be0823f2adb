import { nodeTimers, type Timers } from './schedule.js';

/** One item's answer from its batch's commit: its value, or its own error. */
export type Outcome<R> = { value: R } | { error: unknown };

export interface GroupCommitOptions<T, R> {
  /**
   * Writes one batch (its items in the order they came) and answers each item's outcome in that
   * order, synchronously or not; a throw or a rejection is the outcome of every item of this batch.
   */
  commit(batch: T[]): readonly Outcome<R>[] | Promise<readonly Outcome<R>[]>;
  /** Commits that may run at once: with 1 (the default) the next takes everything that came while one ran. */
  concurrency?: number;
  /** A batch holds at most this many items; the rest wait for the next, in order. */
  maxItems?: number;
  /** A batch takes items while their `bytesOf` stays within this, and always its first. */
  maxBytes?: number;
  bytesOf?(item: T): number;
  /** An item whose commit has not started this many ms after it came is refused with `tooOld`, unwritten. */
  maxWaitMs?: number;
  tooOld?(waitedMs: number): Error;
  /**
   * A commit starts once its first item has waited this long (or `maxItems` wait) rather than in the
   * next turn of the event loop: fewer, larger batches, for writes nobody waits on.
   */
  gatherMs?: number;
  /** Milliseconds, for the ages above. */
  now?: () => number;
  timers?: Timers;
}

export interface GroupCommit<T, R> {
  /** Answered after the commit of the batch it went in: its outcome there (or that commit's failure), or refused by age. */
  add(item: T): Promise<R>;
  /** Starts what waits now (as far as `concurrency` allows), without gathering; resolves once every item added so far is answered. */
  flush(): Promise<void>;
}

interface Waiting<T, R> {
  item: T;
  since: number;
  resolve(value: R): void;
  reject(error: unknown): void;
}

const noAge = (waitedMs: number) => new Error(`waited ${Math.round(waitedMs)} ms`);

/**
 * Group commit: items added while a commit runs wait and go together in the next, so a burst costs
 * a few commits and waits in memory, not on the store. The first commit starts in the turn after its
 * first item came (so that turn's items share it), items are taken strictly in the order they came
 * (none is passed over for a later one), and each caller is answered once its own batch is answered.
 */
export function groupCommit<T, R>({
  commit,
  concurrency = 1,
  maxItems = Infinity,
  maxBytes = Infinity,
  bytesOf = () => 0,
  maxWaitMs = Infinity,
  tooOld = noAge,
  gatherMs = 0,
  now = () => performance.now(),
  timers = nodeTimers,
}: GroupCommitOptions<T, R>): GroupCommit<T, R> {
  /** Ages matter: an item's arrival is read off the clock (no clock read per item otherwise). */
  const timed = maxWaitMs < Infinity || gatherMs > 0;
  let queue: Waiting<T, R>[] = [];
  const running = new Set<Promise<void>>();
  /** A start is planned: in the next turn, or by the gathering timer (its handle). */
  let planned: { timer: unknown } | 'turn' | undefined;
  /** A flush asked for what waits now: no gathering until the queue is empty. */
  let hurry = false;
  /** The answer of the item added last: once it is answered, every earlier item's commit has started. */
  let last: Promise<unknown> = Promise.resolve();

  /** The next batch off the front of the queue; refuses the items that waited too long (arrival order makes them a prefix). */
  const take = (): Waiting<T, R>[] => {
    const at = timed ? now() : 0;
    let i = 0;
    for (; i < queue.length && at - queue[i]!.since > maxWaitMs; i++) queue[i]!.reject(tooOld(at - queue[i]!.since));
    const batch: Waiting<T, R>[] = [];
    let bytes = 0;
    for (; i < queue.length && batch.length < maxItems; i++) {
      const size = bytesOf(queue[i]!.item);
      if (batch.length > 0 && bytes + size > maxBytes) break;
      bytes += size;
      batch.push(queue[i]!);
    }
    queue = queue.slice(i);
    if (queue.length === 0) hurry = false;
    return batch;
  };

  const write = async (batch: Waiting<T, R>[]): Promise<void> => {
    let outcomes: readonly Outcome<R>[];
    try {
      outcomes = await commit(batch.map((waiting) => waiting.item));
    } catch (error) {
      for (const waiting of batch) waiting.reject(error);
      return;
    }
    batch.forEach((waiting, i) => {
      const outcome = outcomes[i];
      if (!outcome) waiting.reject(new Error('the commit answered no outcome for this item'));
      else if ('error' in outcome) waiting.reject(outcome.error);
      else waiting.resolve(outcome.value);
    });
  };

  const start = (): void => {
    planned = undefined;
    while (running.size < concurrency && queue.length > 0) {
      const batch = take();
      if (batch.length === 0) continue;
      const done: Promise<void> = write(batch).finally(() => {
        running.delete(done);
        plan();
      });
      running.add(done);
    }
  };

  const plan = (): void => {
    if (planned || running.size >= concurrency || queue.length === 0) return;
    const gathering = hurry || queue.length >= maxItems ? 0 : gatherMs - (now() - queue[0]!.since);
    if (gathering > 0) planned = { timer: timers.setTimeout(async () => start(), gathering) };
    else {
      planned = 'turn';
      setImmediate(start);
    }
  };

  /** Drops a gathering timer, so the next start is planned for the next turn. */
  const hasten = (): void => {
    if (typeof planned !== 'object') return;
    timers.clearTimeout(planned.timer);
    planned = undefined;
  };

  return {
    add(item) {
      const answer = new Promise<R>((resolve, reject) => queue.push({ item, since: timed ? now() : 0, resolve, reject }));
      last = answer;
      if (queue.length >= maxItems) hasten();
      plan();
      return answer;
    },
    async flush() {
      hurry = queue.length > 0;
      hasten();
      // At once, not in the next turn: a caller that closes the store right after has its batch under way first.
      start();
      await last.catch(() => {});
      await Promise.allSettled(running);
    },
  };
}
