// The storage calls of the fan-out worker, served across a MessageChannel as between the threads:
// an error keeps what its log line shows inline (code, and the cause that gives a storage failure's reason).
import { MessageChannel } from 'node:worker_threads';
import { afterEach, describe, expect, it } from 'vitest';
import { createCaller, answerCall, type FromWorker, type ServedParts, type ToWorker } from '../src/dispatch/thread-messages.js';
import { StorageUnavailableError } from '../src/errors.js';

let close = () => {};
afterEach(() => close());

/** The worker's side of `parts`, served on the other end of a channel. */
function served(parts: Partial<ServedParts>) {
  const { port1: worker, port2: main } = new MessageChannel();
  close = () => {
    worker.close();
    main.close();
  };
  const caller = createCaller(worker);
  worker.on('message', (answer: Extract<ToWorker, { kind: 'answer' }>) => caller.answered(answer));
  main.on('message', (call: Extract<FromWorker, { kind: 'call' }>) => void answerCall(parts as ServedParts, call, (answer) => main.postMessage(answer)));
  return caller;
}

describe('storage calls across the thread', () => {
  it('answer with the value, and a failure with its code and its cause', async () => {
    const full = Object.assign(new Error('database or disk is full'), { code: 'SQLITE_FULL' });
    const caller = served({
      sinkStates: { takeProbe: async (sink: string, now: number) => sink === 'alpha' && now === 5 } as ServedParts['sinkStates'],
      operatorEvents: {
        announce: async () => {
          throw new StorageUnavailableError({ cause: full });
        },
      },
    });

    expect(await caller.remote('sinkStates').takeProbe('alpha', 5)).toBe(true);
    const failure = await caller
      .remote('operatorEvents')
      .announce({ type: 'boxrelay.sink.paused', about: 'alpha', data: {} })
      .then(
        () => undefined,
        (error: unknown) => error as Error & { code?: string },
      );
    expect(failure).toMatchObject({ message: 'storage cannot commit; retry later', code: 'storage_unavailable', name: 'StorageUnavailableError' });
    expect(failure?.cause).toMatchObject({ message: 'database or disk is full', code: 'SQLITE_FULL' });
    // Where it was thrown (the main thread's store), not where the worker rebuilt it.
    expect(failure?.stack).toContain('thread-messages.test.ts');
  });
});
