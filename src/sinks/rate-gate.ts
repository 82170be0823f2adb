import pThrottle from 'p-throttle';
import { SinkStoppingError } from './failures.js';
import type { Sink } from './sink.js';

/**
 * A hook's `maxPerSecond` (contract section 14): in any second at most that many attempts start,
 * first attempts and retries alike (p-throttle's strict window). An attempt above it waits its turn
 * before its request (and its timeout) starts: the wait is neither a failure nor an attempt lost.
 * Turns are taken in call order, so per-box order holds. A lane has at most `concurrency` attempts
 * waiting, so an attempt waits at most ceil(concurrency / maxPerSecond) seconds: that is added to
 * how long an attempt may take, which sizes the rows' lease.
 */
export function withRateGate(sink: Sink, maxPerSecond: number | undefined): Sink {
  if (maxPerSecond === undefined) return sink;
  const turn = pThrottle({ limit: maxPerSecond, interval: 1000, strict: true })(async () => {});
  let waiting = 0;
  const waitTurn = (signal: AbortSignal): Promise<void> => {
    if (signal.aborted) return Promise.reject(new SinkStoppingError());
    return new Promise<void>((resolve, reject) => {
      const stop = () => reject(new SinkStoppingError());
      signal.addEventListener('abort', stop, { once: true });
      void turn().then(() => {
        signal.removeEventListener('abort', stop);
        resolve();
      });
    });
  };
  return {
    ...sink,
    attemptTimeoutMs: sink.attemptTimeoutMs + Math.ceil(sink.concurrency / maxPerSecond) * 1000,
    async deliver(event, signal, trace) {
      waiting++;
      try {
        await waitTurn(signal);
      } finally {
        waiting--;
      }
      // The turn may have come after a pause or after the lease ran out: the attempt starts only now.
      await trace?.admit?.();
      return sink.deliver(event, signal, trace);
    },
    throttled: () => waiting,
    up: () => sink.up(),
    close: () => sink.close(),
  };
}
