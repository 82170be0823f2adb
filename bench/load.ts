import autocannon from 'autocannon';
import { Pool } from 'undici';
import { BENCH_SECRET, signedDelivery } from './deliveries.js';

export interface LoadSettings {
  seconds: number;
  connections: number;
  /**
   * Requests per second over all connections, sent evenly (one every 1/rate s); unset: as fast as
   * the target answers (autocannon, closed loop).
   */
  rate?: number;
  /** Ends the load early. */
  signal?: AbortSignal;
  /** Every answer, as it arrives. */
  onResponse?(statusCode: number, latencyMs: number): void;
  /** Every request that got no answer (refused, reset, timed out), as it ends. */
  onError?(): void;
  /** Where the deliveries go, signed with what: default `POST /webhooks` with the bench's secret. */
  endpoint?: { path: string; secret: string };
}

export interface LoadResult {
  /** 2xx responses. */
  accepted: number;
  /**
   * 2xx per second of the run; at a `rate`, from the first request to the last answer, so below the
   * rate by the queue of answers still due when the sending stopped.
   */
  acceptedPerSecond: number;
  non2xx: number;
  /** Connection errors, timeouts (10 s) included. */
  errors: number;
  /** The first error's message, if any. */
  firstError?: string;
  p50: number;
  p99: number;
  max: number;
  /** process.hrtime (CLOCK_MONOTONIC, comparable across processes) of the first request and the last 2xx. */
  startedNs: bigint;
  lastOkNs: bigint;
}

/** The value at fraction `p` of ascending `sorted` (0 when empty). */
export const percentile = (sorted: number[], p: number): number => sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))] ?? 0;

/** One answer of a load, stamped with when it arrived (epoch ms). */
export interface Answer {
  at: number;
  status: number;
  latencyMs: number;
}

export interface AnswersSummary {
  requests: number;
  p50: number;
  p99: number;
  max: number;
  non2xx: number;
}

/** The answers that arrived from `from` to `to` (epoch ms, both included): how many, their latency, how many were not 2xx. */
export function summarizeAnswers(answers: Answer[], from: number, to: number): AnswersSummary {
  const within = answers.filter((a) => a.at >= from && a.at <= to);
  const latencies = within.map((a) => a.latencyMs).sort((a, b) => a - b);
  return {
    requests: within.length,
    p50: percentile(latencies, 0.5),
    p99: percentile(latencies, 0.99),
    max: latencies.at(-1) ?? 0,
    non2xx: within.filter((a) => a.status < 200 || a.status >= 300).length,
  };
}

const DEFAULT_ENDPOINT = { path: '/webhooks', secret: BENCH_SECRET };

/**
 * Load against POST /webhooks (or `endpoint`): every request gets a unique delivery id and a fresh signature, ~1 KB
 * bodies, the same settings for every target. At a `rate`, paced evenly; else autocannon at full speed.
 */
export function runLoad(port: number, settings: LoadSettings): Promise<LoadResult> {
  return settings.rate ? pacedLoad(port, { ...settings, rate: settings.rate }) : fullLoad(port, settings);
}

/**
 * Open loop: request i is due at i / rate seconds from the start, whether or not earlier ones were
 * answered, and its latency counts from then (a request queued behind busy connections waits on
 * the clock, as the upstream's would). autocannon's `overallRate` is no fixed rate: each connection
 * sends its quota for the second back to back at the second's start, then idles, so its latencies
 * are those of a burst at full speed.
 */
async function pacedLoad(port: number, { seconds, connections, rate, signal, onResponse, onError, endpoint = DEFAULT_ENDPOINT }: LoadSettings & { rate: number }): Promise<LoadResult> {
  // autocannon's timeout, so that an error means the same for both.
  const pool = new Pool(`http://127.0.0.1:${port}`, { connections, pipelining: 1, headersTimeout: 10_000, bodyTimeout: 10_000 });
  const latencies: number[] = [];
  let accepted = 0;
  let non2xx = 0;
  let errors = 0;
  let firstError: string | undefined;
  let lastOkNs = 0n;
  const startedNs = process.hrtime.bigint();
  const endNs = startedNs + BigInt(Math.round(seconds * 1e9));
  // The first two seconds (a fifth of a short run) open the connections and warm both ends up:
  // sent and counted as accepted, not in the latencies (autocannon's targets get a warm-up too).
  const measuredFromNs = startedNs + BigInt(Math.round(Math.min(2, seconds / 5) * 1e9));
  const underWay = new Set<Promise<void>>();
  const send = async (n: number, dueNs: bigint) => {
    let statusCode: number;
    try {
      const d = signedDelivery(n, endpoint.secret);
      const answer = await pool.request({ method: 'POST', path: endpoint.path, headers: d.headers, body: d.body });
      await answer.body.dump();
      statusCode = answer.statusCode;
    } catch (error) {
      errors++;
      firstError ??= error instanceof Error ? error.message : String(error);
      onError?.();
      return;
    }
    const atNs = process.hrtime.bigint();
    const latencyMs = Number(atNs - dueNs) / 1e6;
    if (dueNs >= measuredFromNs) latencies.push(latencyMs);
    if (statusCode >= 200 && statusCode < 300) {
      accepted++;
      lastOkNs = atNs;
    } else non2xx++;
    onResponse?.(statusCode, latencyMs);
  };
  const intervalNs = BigInt(Math.round(1e9 / rate));
  const dueAt = (n: number) => startedNs + BigInt(n) * intervalNs;
  let n = 0;
  while (!signal?.aborted) {
    const nowNs = process.hrtime.bigint();
    if (nowNs >= endNs) break;
    for (; dueAt(n) <= nowNs; n++) {
      const request = send(n, dueAt(n));
      underWay.add(request);
      void request.finally(() => underWay.delete(request));
    }
    await new Promise((resolve) => setTimeout(resolve, 1));
  }
  await Promise.all(underWay);
  await pool.close();
  latencies.sort((a, b) => a - b);
  const elapsedSeconds = Number(process.hrtime.bigint() - startedNs) / 1e9;
  return {
    accepted,
    acceptedPerSecond: accepted / elapsedSeconds,
    non2xx,
    errors,
    ...(firstError === undefined ? {} : { firstError }),
    p50: Math.round(percentile(latencies, 0.5)),
    p99: Math.round(percentile(latencies, 0.99)),
    max: Math.round(latencies.at(-1) ?? 0),
    startedNs,
    lastOkNs,
  };
}

/** autocannon at full speed (closed loop: each connection sends its next request once answered). */
function fullLoad(port: number, { seconds, connections, signal, onResponse, endpoint = DEFAULT_ENDPOINT }: LoadSettings): Promise<LoadResult> {
  let n = 0;
  let lastOkNs = 0n;
  const startedNs = process.hrtime.bigint();
  return new Promise((resolve, reject) => {
    const options: autocannon.Options = {
      url: `http://127.0.0.1:${port}`,
      connections,
      duration: seconds,
      requests: [
        {
          method: 'POST',
          path: endpoint.path,
          setupRequest: (request) => {
            const d = signedDelivery(n++, endpoint.secret);
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
