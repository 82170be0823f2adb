// Calls between threads: one side serves parts (objects whose methods return promises), the other
// calls their methods as if they were its own; each answer is the method's value, or its error
// rebuilt with its name, code, stack and causes. Both sides of every worker thread of the relay use
// this, over a Worker, a worker's parentPort or a MessageChannel's ports.
import type { Transferable } from 'node:worker_threads';
import { CrossedError, serializeError, type SerializedError } from './errors.js';

/** Where messages go and come from: a Worker, a worker's parentPort, or one end of a MessageChannel. */
export interface Endpoint {
  postMessage(value: unknown, transferList?: readonly Transferable[]): void;
  on(event: 'message', listener: (value: unknown) => void): unknown;
}

/** Objects by name, each method answering a promise: what one side serves and the other calls. */
export type Parts<S> = { [P in keyof S]: object };

interface Call {
  kind: 'call';
  id: number;
  part: string;
  method: string;
  args: unknown[];
}

type Answer = { kind: 'answer'; id: number; value: unknown } | { kind: 'answer'; id: number; error: SerializedError };

const isCall = (message: unknown): message is Call => (message as Partial<Call> | null)?.kind === 'call';
const isAnswer = (message: unknown): message is Answer => (message as Partial<Answer> | null)?.kind === 'answer';

type Fn = (...args: never[]) => unknown;
type MethodOf<P, M extends keyof P> = P[M] extends Fn ? P[M] : never;

export interface Caller<S extends Parts<S>> {
  /** One part as an object whose methods call the other side (it is not a thenable: awaiting it posts nothing). */
  remote<P extends keyof S & string>(part: P): S[P];
  /** One call whose buffers in `transfer` move to the other thread rather than being copied (they are unusable here after). */
  call<P extends keyof S & string, M extends keyof S[P] & string>(
    part: P,
    method: M,
    args: Parameters<MethodOf<S[P], M>>,
    transfer?: readonly Transferable[],
  ): Promise<Awaited<ReturnType<MethodOf<S[P], M>>>>;
  /** The other side is gone: every call waiting and every later one fails with `error`. */
  fail(error: Error): void;
}

/** The calling side: answers come on the same endpoint, in any order. */
export function callerOver<S extends Parts<S>>(endpoint: Endpoint): Caller<S> {
  let nextId = 0;
  let gone: Error | undefined;
  const waiting = new Map<number, { resolve(value: unknown): void; reject(error: Error): void }>();
  endpoint.on('message', (message: unknown) => {
    if (!isAnswer(message)) return;
    const call = waiting.get(message.id);
    waiting.delete(message.id);
    if ('error' in message) call?.reject(new CrossedError(message.error));
    else call?.resolve(message.value);
  });
  const call = (part: string, method: string, args: unknown[], transfer?: readonly Transferable[]) =>
    new Promise<unknown>((resolve, reject) => {
      if (gone) return reject(gone);
      const id = nextId++;
      waiting.set(id, { resolve, reject });
      endpoint.postMessage({ kind: 'call', id, part, method, args } satisfies Call, transfer);
    });
  return {
    remote: (part) =>
      new Proxy({} as S[typeof part], {
        get: (_target, method) => (typeof method !== 'string' || method === 'then' ? undefined : (...args: unknown[]) => call(part, method, args)),
      }),
    call: (part, method, args, transfer) => call(part, method, args, transfer) as never,
    fail(error) {
      gone = error;
      for (const caller of waiting.values()) caller.reject(error);
      waiting.clear();
    },
  };
}

export interface Served {
  /** Resolves once every call received so far has been answered. */
  answered(): Promise<void>;
}

/**
 * The serving side: runs each call on its part and posts the answer. `transferOf` names the buffers
 * of an answer to move rather than copy.
 */
export function serveParts(endpoint: Endpoint, parts: object, { transferOf }: { transferOf?: (value: unknown) => readonly Transferable[] } = {}): Served {
  const underWay = new Set<Promise<void>>();
  const answer = async ({ id, part, method, args }: Call): Promise<void> => {
    try {
      const fn = (parts as Record<string, Record<string, unknown> | undefined>)[part]?.[method];
      if (typeof fn !== 'function') throw new Error(`${part} has no method ${method}`);
      const value: unknown = await (fn as (...args: unknown[]) => unknown)(...args);
      endpoint.postMessage({ kind: 'answer', id, value } satisfies Answer, transferOf?.(value));
    } catch (error) {
      endpoint.postMessage({ kind: 'answer', id, error: serializeError(error) } satisfies Answer);
    }
  };
  endpoint.on('message', (message: unknown) => {
    if (!isCall(message)) return;
    const answering = answer(message);
    underWay.add(answering);
    void answering.finally(() => underWay.delete(answering));
  });
  return { answered: async () => void (await Promise.allSettled(underWay)) };
}
