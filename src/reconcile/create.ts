import pThrottle from 'p-throttle';
import type { Config } from '../config/schema.js';
import { createUpstreamClient, upstreamFetch, type UpstreamClientOptions } from '../upstream/client.js';
import { createReconciler, type Reconciler, type ReconcilerDeps } from './reconciler.js';

/** The reconciler's own dependencies, but its upstream client and retention come from the config. */
export interface ReconcilerFromConfig extends Omit<ReconcilerDeps, 'upstream' | 'retentionDays'> {
  config: Pick<Config, 'upstreamBaseUrl' | 'upstreamApiKey' | 'reconcileMaxRps' | 'retentionDays' | 'proxyEnv'>;
  /** Upstream client timing (tests shorten the backoff). */
  upstream?: Pick<UpstreamClientOptions, 'minTimeout' | 'maxTimeout' | 'randomize' | 'timeoutMs'>;
}

/** Whether the config lets the relay read the upstream API (contract section 9). */
export const reconcileConfigured = (config: Pick<Config, 'upstreamBaseUrl' | 'upstreamApiKey'>): boolean =>
  config.upstreamBaseUrl !== undefined && config.upstreamApiKey !== undefined;

/**
 * The reconciler with an upstream client of its own, throttled to BOXRELAY_RECONCILE_MAX_RPS requests
 * a second (retries included: each attempt is a request the upstream counts).
 */
export function reconcilerFromConfig({ config, upstream, ...deps }: ReconcilerFromConfig): Reconciler {
  const throttle = pThrottle({ limit: 1, interval: 1000 / config.reconcileMaxRps, strict: true });
  const log = deps.logger.child({ part: 'reconcile' });
  // Stopping ends the requests and retry waits of a run under way, so a shutdown is not held up by them.
  const stopping = new AbortController();
  const send = upstreamFetch(config.proxyEnv);
  const client = createUpstreamClient({
    signal: stopping.signal,
    baseUrl: config.upstreamBaseUrl as string,
    apiKey: config.upstreamApiKey as string,
    fetch: throttle((input: string | URL | Request, init?: RequestInit) => send(input, init)),
    onRetry: ({ operation, attempt, error }) => log.warn({ operation, attempt }, `${error.message}; trying again`),
    ...upstream,
  });
  const reconciler = createReconciler({ ...deps, upstream: client, retentionDays: config.retentionDays });
  return {
    ...reconciler,
    stop() {
      // The run sees its own stop first, so the requests cut next do not read as an upstream failure.
      const stopped = reconciler.stop();
      stopping.abort();
      return stopped;
    },
  };
}
