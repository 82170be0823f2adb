import autocannon from 'autocannon';
import { signedDelivery } from './deliveries.js';

export interface LoadSettings {
  seconds: number;
  connections: number;
  /** Requests per second over all connections; unset: as fast as the target answers. */
  rate?: number;
  /** Ends the load early. */
  signal?: AbortSignal;
  /** Every answer, as it arrives. */
  onResponse?(statusCode: number, latencyMs: number): void;
}

export interface LoadResult {
  /** 2xx responses. */
  accepted: number;
  acceptedPerSecond: number;
  non2xx: number;
  /** Connection errors, timeouts included. */
  errors: number;
  p50: number;
  p99: number;
  max: number;
  /** process.hrtime (CLOCK_MONOTONIC, comparable across processes) of the first request and the last 2xx. */
  startedNs: bigint;
  lastOkNs: bigint;
}

/**
 * autocannon against POST /webhooks: every request gets a unique delivery id and a fresh signature
 * (setupRequest), ~1 KB bodies, the same settings for every target.
 */
export function runLoad(port: number, { seconds, connections, rate, signal, onResponse }: LoadSettings): Promise<LoadResult> {
  let n = 0;
  let lastOkNs = 0n;
  const startedNs = process.hrtime.bigint();
  return new Promise((resolve, reject) => {
    const options: autocannon.Options = {
      url: `http://127.0.0.1:${port}`,
      connections,
      duration: seconds,
      ...(rate ? { overallRate: rate } : {}),
      requests: [
        {
          method: 'POST',
          path: '/webhooks',
          setupRequest: (request) => {
            const d = signedDelivery(n++);
            return { ...request, headers: d.headers, body: d.body };
          },
        },
      ],
    };
    const instance = autocannon(options, (error, result) => {
      if (error) return reject(error);
      const accepted = (result as unknown as Record<'2xx', number>)['2xx'];
      resolve({
        accepted,
        acceptedPerSecond: accepted / result.duration,
        non2xx: result.non2xx,
        errors: result.errors,
        p50: result.latency.p50,
        p99: result.latency.p99,
        max: result.latency.max,
        startedNs,
        lastOkNs,
      });
    });
    instance.on('response', (_client, statusCode, _bytes, latencyMs) => {
      if (statusCode >= 200 && statusCode < 300) lastOkNs = process.hrtime.bigint();
      onResponse?.(statusCode, latencyMs);
    });
    signal?.addEventListener('abort', () => instance.stop(), { once: true });
  });
}
