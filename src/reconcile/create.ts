import type { Config } from '../config/schema.js';
import { createUpstreamClient, upstreamFetch, type UpstreamClientOptions } from '../upstream/client.js';
import { realWait, type Wait } from '../clock.js';
import { paced } from './pace.js';
import { createReconciler, type Reconciler, type ReconcilerDeps } from './reconciler.js';

type FromConfig = 'upstream' | 'retentionDays' | 'maxPages' | 'maxDurationMs';

/** The reconciler's own dependencies, but its upstream client, retention and bounds come from the config. */
export interface ReconcilerFromConfig extends Omit<ReconcilerDeps, FromConfig> {
  config: Pick<Config, 'upstreamBaseUrl' | 'upstreamApiKey' | 'reconcileMaxRps' | 'reconcileMaxPages' | 'reconcileMaxDuration' | 'retentionDays' | 'proxyEnv'>;
  /** Upstream client timing (tests shorten the backoff). */
  upstream?: Pick<UpstreamClientOptions, 'minTimeout' | 'maxTimeout' | 'randomize' | 'timeoutMs'>;
  /** How a request waits for its turn under BOXRELAY_RECONCILE_MAX_RPS, and a retry for a `Retry-After`, by `clock` (tests move their clock). */
  wait?: Wait;
}

/** Whether the config lets the relay read the upstream API (contract section 9). */
export const reconcileConfigured = (config: Pick<Config, 'upstreamBaseUrl' | 'upstreamApiKey'>): boolean =>
  config.upstreamBaseUrl !== undefined && config.upstreamApiKey !== undefined;

/**
 * The reconciler with an upstream client of its own, throttled to BOXRELAY_RECONCILE_MAX_RPS requests
 * a second (retries included: each attempt is a request the upstream counts). A run hands its own
 * signal to each request, so stopping it (shutdown, lost lease, a bound) cuts requests and waits.
 */
export function reconcilerFromConfig({ config, upstream, wait = realWait, ...deps }: ReconcilerFromConfig): Reconciler {
  const log = deps.logger.child({ part: 'reconcile' });
  const send = paced(upstreamFetch(config.proxyEnv), { intervalMs: 1000 / config.reconcileMaxRps, clock: deps.clock, wait });
  const client = createUpstreamClient({
    baseUrl: config.upstreamBaseUrl as string,
    apiKey: config.upstreamApiKey as string,
    fetch: send,
    clock: deps.clock,
    wait,
    onRetry: ({ operation, attempt, error }) => log.warn({ operation, attempt }, `${error.message}; trying again`),
    ...upstream,
  });
  return createReconciler({
    ...deps,
    upstream: client,
    retentionDays: config.retentionDays,
    maxPages: config.reconcileMaxPages,
    maxDurationMs: config.reconcileMaxDuration,
  });
}
