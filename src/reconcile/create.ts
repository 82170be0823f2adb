import { DEFAULT_ACCOUNT } from '../config/default-account.js';
import type { Config } from '../config/schema.js';
import { accountUpstreams, type AccountUpstream, type UpstreamConfig } from '../upstream/account-upstream.js';
import { createUpstreamClient, upstreamFetch, type UpstreamClientOptions } from '../upstream/client.js';
import { realWait, type Wait } from '../clock.js';
import { paced } from './pace.js';
import { createReconciler, type Reconciler, type ReconcilerDeps } from './reconciler.js';

type FromConfig = 'upstream' | 'retentionDays' | 'maxPages' | 'maxDurationMs' | 'account' | 'apiKeySetting';

/** The reconciler's own dependencies, but its upstream client, retention and bounds come from the config. */
export interface ReconcilerFromConfig extends Omit<ReconcilerDeps, FromConfig> {
  config: Pick<Config, 'reconcileMaxRps' | 'reconcileMaxPages' | 'reconcileMaxDuration' | 'retentionDays' | 'proxyEnv'> & UpstreamConfig;
  /** Upstream client timing (tests shorten the backoff). */
  upstream?: Pick<UpstreamClientOptions, 'minTimeout' | 'maxTimeout' | 'randomize' | 'timeoutMs'>;
  /** How a request waits for its turn under BOXRELAY_RECONCILE_MAX_RPS, and a retry for a `Retry-After`, by `clock` (tests move their clock). */
  wait?: Wait;
}

/** Whether the config lets the relay read the upstream API (contract section 9) for any account (section 21). */
export const reconcileConfigured = (config: UpstreamConfig): boolean => accountUpstreams(config).length > 0;

/**
 * A reconciler for each account with API credentials (contract section 21), `default` first, by
 * account name: each runs against its own upstream, one run at a time, and stores what it finds
 * under its account's keys.
 */
export function reconcilersFromConfig(options: ReconcilerFromConfig): Map<string, Reconciler> {
  return new Map(accountUpstreams(options.config).map((credentials) => [credentials.account, accountReconciler(credentials, options)]));
}

/**
 * One account's reconciler with an upstream client of its own, throttled to
 * BOXRELAY_RECONCILE_MAX_RPS requests a second (retries included: each attempt is a request the
 * upstream counts). A run hands its own signal to each request, so stopping it (shutdown, lost
 * lease, a bound) cuts requests and waits.
 */
export function accountReconciler(credentials: AccountUpstream, { config, upstream, wait = realWait, ...deps }: ReconcilerFromConfig): Reconciler {
  const log = deps.logger.child({ part: 'reconcile', ...(credentials.account === DEFAULT_ACCOUNT ? {} : { account: credentials.account }) });
  const send = paced(upstreamFetch(config.proxyEnv), { intervalMs: 1000 / config.reconcileMaxRps, clock: deps.clock, wait });
  const client = createUpstreamClient({
    baseUrl: credentials.baseUrl,
    apiKey: credentials.apiKey,
    fetch: send,
    clock: deps.clock,
    wait,
    onRetry: ({ operation, attempt, error }) => log.warn({ operation, attempt }, `${error.message}; trying again`),
    ...upstream,
  });
  return createReconciler({
    ...deps,
    account: credentials.account,
    apiKeySetting: credentials.apiKeySetting,
    upstream: client,
    retentionDays: config.retentionDays,
    maxPages: config.reconcileMaxPages,
    maxDurationMs: config.reconcileMaxDuration,
  });
}
