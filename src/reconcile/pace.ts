import type { Clock, Wait } from '../clock.js';

type Send = (input: string | URL | Request, init?: RequestInit) => Promise<Response>;

/**
 * `send` at most once every `intervalMs` by `clock`: each request takes the next free turn, in the
 * order asked (retries included: each attempt is a request the upstream counts). A request whose
 * signal aborts while it waits is not sent. Not p-throttle: it reads Date.now and sleeps on its own
 * timers, so a test could only measure the rate by the wall clock.
 */
export function paced(send: Send, { intervalMs, clock, wait }: { intervalMs: number; clock: Clock; wait: Wait }): Send {
  let nextTurn = -Infinity;
  return async (input, init) => {
    const now = clock.now();
    const turn = Math.max(now, nextTurn);
    nextTurn = turn + intervalMs;
    if (turn > now) await wait(turn - now, init?.signal ?? undefined);
    return send(input, init);
  };
}
