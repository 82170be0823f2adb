import { describe, expect, it } from 'vitest';
import { groupCommit, type GroupCommitOptions, type Outcome } from '../src/group-commit.js';
import { ManualClock } from './support/clock.js';
import { HandTimers } from './support/timers.js';

/** The next turn of the event loop: a commit planned for it has started. */
const turn = () => new Promise<void>((resolve) => setImmediate(resolve));

interface Call<T> {
  batch: T[];
  answer(outcomes: Outcome<string>[]): void;
  fail(error: unknown): void;
}

/** Each commit is held until the test answers it: the batches it was given, in order, and their answers. */
function heldCommits<T>() {
  const calls: Call<T>[] = [];
  let told = 0;
  let waiting: ((call: Call<T>) => void) | undefined;
  const commit = (batch: T[]) =>
    new Promise<readonly Outcome<string>[]>((resolve, reject) => {
      calls.push({ batch, answer: resolve, fail: reject });
      waiting?.(calls[told++]!);
      waiting = undefined;
    });
  /** The next commit not yet returned by `next`, once it has started. */
  const next = (): Promise<Call<T>> => (told < calls.length ? Promise.resolve(calls[told++]!) : new Promise((resolve) => (waiting = resolve)));
  /** Every item written as `<item>!`. */
  const written = (batch: T[]): Outcome<string>[] => batch.map((item) => ({ value: `${String(item)}!` }));
  return { calls, commit, next, written };
}

/** Each promise's fate, kept as it comes, without an unhandled rejection. */
function fates<R>(answers: Promise<R>[]) {
  const seen: ({ value: R } | { error: unknown } | undefined)[] = answers.map(() => undefined);
  answers.forEach((answer, i) => answer.then((value) => (seen[i] = { value }), (error: unknown) => (seen[i] = { error })));
  return seen;
}

function committing<T>(options: Partial<GroupCommitOptions<T, string>> = {}) {
  const held = heldCommits<T>();
  const clock = new ManualClock(1000);
  const commits = groupCommit<T, string>({ commit: held.commit, now: () => clock.now(), ...options });
  return { ...held, clock, commits };
}

describe('group commit', () => {
  it('puts the items of one turn in one commit, started in the next turn', async () => {
    const { calls, commits, next, written } = committing<string>();
    const answers = ['a', 'b', 'c'].map((item) => commits.add(item));
    expect(calls).toHaveLength(0);
    await turn();
    const call = await next();
    expect(call.batch).toEqual(['a', 'b', 'c']);
    call.answer(written(call.batch));
    expect(await Promise.all(answers)).toEqual(['a!', 'b!', 'c!']);
  });

  it('runs one commit at a time: what comes while one runs is the next, whole, once it ends', async () => {
    const { calls, commits, next, written } = committing<string>();
    const first = commits.add('a');
    const running = await next();
    const later = [commits.add('b')];
    await turn();
    later.push(commits.add('c'));
    await turn();
    expect(calls).toHaveLength(1);
    const seen = fates(later);
    running.answer(written(['a']));
    expect(await first).toBe('a!');
    const second = await next();
    expect(second.batch).toEqual(['b', 'c']);
    expect(seen).toEqual([undefined, undefined]);
    second.answer(written(['b', 'c']));
    expect(await Promise.all(later)).toEqual(['b!', 'c!']);
  });

  it('answers each caller its own outcome, an error to that caller alone', async () => {
    const { commits, next } = committing<string>();
    const answers = ['a', 'b', 'c'].map((item) => commits.add(item));
    const seen = fates(answers);
    const refused = new Error('b refused');
    (await next()).answer([{ value: 'A' }, { error: refused }, { value: 'C' }]);
    await Promise.allSettled(answers);
    expect(seen).toEqual([{ value: 'A' }, { error: refused }, { value: 'C' }]);
  });

  it('rejects exactly the callers of a failed commit, and commits the next batch', async () => {
    const { commits, next, written } = committing<string>();
    const firstAnswers = [commits.add('a'), commits.add('b')];
    const firstBatch = fates(firstAnswers);
    const first = await next();
    const nextAnswers = [commits.add('c')];
    const nextBatch = fates(nextAnswers);
    const failure = new Error('disk full');
    first.fail(failure);
    await Promise.allSettled(firstAnswers);
    expect(firstBatch).toEqual([{ error: failure }, { error: failure }]);
    expect(nextBatch).toEqual([undefined]);
    const second = await next();
    expect(second.batch).toEqual(['c']);
    second.answer(written(['c']));
    await Promise.allSettled(nextAnswers);
    expect(nextBatch).toEqual([{ value: 'c!' }]);
  });

  it('rejects the callers of a commit that throws at once, or answers fewer outcomes than items', async () => {
    const thrown = new Error('no such table');
    let answer: (batch: string[]) => readonly Outcome<string>[] = () => {
      throw thrown;
    };
    const commits = groupCommit<string, string>({ commit: (batch) => answer(batch) });
    const failed = fates([commits.add('a')]);
    await commits.flush();
    expect(failed).toEqual([{ error: thrown }]);
    answer = () => [{ value: 'x' }];
    const short = fates([commits.add('b'), commits.add('c')]);
    await commits.flush();
    expect(short[0]).toEqual({ value: 'x' });
    expect(short[1]).toMatchObject({ error: { message: 'the commit answered no outcome for this item' } });
  });

  it('refuses, unwritten, what waited longer than maxWaitMs for its commit to start, and commits the rest', async () => {
    const { commits, clock, next, written } = committing<string>({ maxWaitMs: 500, tooOld: (ms) => new Error(`waited ${ms} ms`) });
    const first = commits.add('a');
    const running = await next();
    const oldAnswers = [commits.add('b'), commits.add('c')];
    const old = fates(oldAnswers);
    clock.advance(1);
    // It will have waited exactly the limit: still in time.
    const atLimit = commits.add('e');
    clock.advance(299);
    const young = commits.add('f');
    clock.advance(201);
    running.answer(written(['a']));
    await first;
    const second = await next();
    await Promise.allSettled(oldAnswers);
    expect(old).toEqual([{ error: new Error('waited 501 ms') }, { error: new Error('waited 501 ms') }]);
    expect(second.batch).toEqual(['e', 'f']);
    second.answer(written(['e', 'f']));
    expect(await Promise.all([atLimit, young])).toEqual(['e!', 'f!']);
  });

  it('takes items strictly in order within maxItems and maxBytes, so none waits behind a later one', async () => {
    const { commits, next, written } = committing<string>({ maxItems: 3, maxBytes: 10, bytesOf: (item) => item.length });
    const items = ['a', 'bb', 'cccccccccccc', 'd', 'e', 'f', 'g', 'hhhhhh', 'iiiii'];
    const answers = items.map((item) => commits.add(item));
    const batches: string[][] = [];
    for (let i = 0; i < 5; i++) {
      const call = await next();
      batches.push(call.batch);
      // Calls keep coming while the first commits run: they queue behind those already waiting.
      if (i < 2) answers.push(commits.add(i === 0 ? 'j' : 'k'));
      call.answer(written(call.batch));
    }
    await Promise.all(answers);
    expect(batches).toEqual([
      ['a', 'bb'],
      // Alone past the limit: a batch always takes its first item.
      ['cccccccccccc'],
      ['d', 'e', 'f'],
      ['g', 'hhhhhh'],
      ['iiiii', 'j', 'k'],
    ]);
  });

  it('runs up to `concurrency` commits at once, each turn its own', async () => {
    const { commits, next, written } = committing<string>({ concurrency: Infinity });
    const a = commits.add('a');
    const first = await next();
    const b = commits.add('b');
    const second = await next();
    expect([first.batch, second.batch]).toEqual([['a'], ['b']]);
    second.answer(written(['b']));
    expect(await b).toBe('b!');
    first.answer(written(['a']));
    expect(await a).toBe('a!');
  });

  it('gathers for gatherMs from the first item, starts at once when maxItems wait, and a flush starts what waits within its call', async () => {
    const timers = new HandTimers();
    const { calls, commits, clock, next, written } = committing<string>({ gatherMs: 100, maxItems: 3, timers });
    const gathered = [commits.add('a'), commits.add('b')];
    await turn();
    expect(calls).toHaveLength(0);
    expect(timers.planned.map((timer) => timer.ms)).toEqual([100]);
    clock.advance(100);
    await timers.fire();
    const first = await next();
    expect(first.batch).toEqual(['a', 'b']);
    first.answer(written(['a', 'b']));
    await Promise.all(gathered);

    const full = ['c', 'd', 'e'].map((item) => commits.add(item));
    expect(timers.planned).toEqual([]);
    const second = await next();
    expect(second.batch).toEqual(['c', 'd', 'e']);

    const waiting = commits.add('f');
    clock.advance(30);
    // The running commit ends: the next gathers for what its first item has left of gatherMs.
    second.answer(written(['c', 'd', 'e']));
    await Promise.all(full);
    await turn();
    expect(timers.planned.map((timer) => timer.ms)).toEqual([70]);
    let flushed = false;
    const flushing = commits.flush().then(() => (flushed = true));
    expect(timers.planned).toEqual([]);
    // Started at once, within the call.
    expect(calls).toHaveLength(3);
    const third = await next();
    expect(third.batch).toEqual(['f']);
    expect(flushed).toBe(false);
    third.answer(written(['f']));
    await flushing;
    expect(await waiting).toBe('f!');
  });

  it('flush resolves once every item added so far is answered, those of a commit already running included', async () => {
    const { commits, next, written } = committing<string>();
    const answers = fates([commits.add('a')]);
    const first = await next();
    commits.add('b').catch(() => {});
    let flushed = false;
    const flushing = commits.flush().then(() => (flushed = true));
    await turn();
    expect(flushed).toBe(false);
    first.answer(written(['a']));
    const second = await next();
    expect(flushed).toBe(false);
    second.fail(new Error('lost'));
    await flushing;
    expect(answers).toEqual([{ value: 'a!' }]);
    await commits.flush();
  });
});
