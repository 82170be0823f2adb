// Calls between threads (src/threads), across a MessageChannel as between the relay's threads: the
// value comes back, an error keeps what its log line shows inline (name, code, stack, and the cause
// that gives a storage failure's reason), buffers named in a transfer list move rather than copy.
import { MessageChannel } from 'node:worker_threads';
import { afterEach, describe, expect, it } from 'vitest';
import { StorageUnavailableError } from '../src/errors.js';
import { callerOver, serveParts } from '../src/threads/calls.js';

interface Parts {
  states: { takeProbe(sink: string, now: number): Promise<boolean>; announce(): Promise<void> };
  bytes: { length(buffer: ArrayBuffer): Promise<number>; make(size: number): Promise<ArrayBuffer> };
  slow: { after(release: number): Promise<string> };
}

let close = () => {};
afterEach(() => close());

/** `parts` served on one end of a channel; the caller on the other. */
function served(parts: Partial<Parts>) {
  const { port1: caller, port2: server } = new MessageChannel();
  close = () => {
    caller.close();
    server.close();
  };
  const serving = serveParts(server, parts, { transferOf: (value) => (value instanceof ArrayBuffer ? [value] : []) });
  return { caller: callerOver<Parts>(caller), serving };
}

const failureOf = (promise: Promise<unknown>) =>
  promise.then(
    () => undefined,
    (error: unknown) => error as Error & { code?: string },
  );

describe('calls between threads', () => {
  it('answer with the value, and a failure with its name, code, stack and causes', async () => {
    const full = Object.assign(new Error('database or disk is full'), { code: 'SQLITE_FULL' });
    const { caller } = served({
      states: {
        takeProbe: async (sink, now) => sink === 'alpha' && now === 5,
        announce: async () => {
          throw new StorageUnavailableError({ cause: full });
        },
      },
    });

    expect(await caller.remote('states').takeProbe('alpha', 5)).toBe(true);
    const failure = await failureOf(caller.remote('states').announce());
    expect(failure).toMatchObject({ message: 'storage cannot commit; retry later', code: 'storage_unavailable', name: 'StorageUnavailableError' });
    expect(failure?.cause).toMatchObject({ message: 'database or disk is full', code: 'SQLITE_FULL' });
    // Where it was thrown (the serving side), not where the caller rebuilt it.
    expect(failure?.stack).toContain('thread-calls.test.ts');
    // A method the other side does not serve fails, it does not hang.
    expect(await failureOf((caller.remote('states') as unknown as { nothing(): Promise<void> }).nothing())).toMatchObject({ message: 'states has no method nothing' });
  });

  it('moves the buffers of a transfer list both ways, copies the rest', async () => {
    const { caller } = served({
      bytes: { length: async (buffer) => new Uint8Array(buffer).reduce((sum, byte) => sum + byte, 0), make: async (size) => new ArrayBuffer(size) },
    });
    const moved = new Uint8Array([1, 2, 3]).buffer;
    expect(await caller.call('bytes', 'length', [moved], [moved])).toBe(6);
    expect(moved.byteLength).toBe(0);
    const copied = new Uint8Array([4, 5]).buffer;
    expect(await caller.call('bytes', 'length', [copied])).toBe(9);
    expect(copied.byteLength).toBe(2);
    expect((await caller.remote('bytes').make(16)).byteLength).toBe(16);
  });

  it('the server says when every call it took is answered; a caller whose other side is gone fails what waits and what comes after', async () => {
    let release = () => {};
    let arrived = () => {};
    const reached = new Promise<void>((resolve) => (arrived = resolve));
    const { caller, serving } = served({
      slow: {
        after: (n) => {
          arrived();
          return new Promise((resolve) => (release = () => resolve(`answer ${n}`)));
        },
      },
    });
    const answer = caller.remote('slow').after(1);
    await reached;
    let answered = false;
    const idle = serving.answered().then(() => (answered = true));
    expect(answered).toBe(false);
    release();
    await idle;
    expect(await answer).toBe('answer 1');

    const waiting = failureOf(caller.remote('slow').after(2));
    const gone = new StorageUnavailableError();
    caller.fail(gone);
    expect(await waiting).toBe(gone);
    expect(await failureOf(caller.remote('slow').after(3))).toBe(gone);
  });
});
