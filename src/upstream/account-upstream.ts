import { DEFAULT_ACCOUNT } from '../config/default-account.js';
import { accountNamesOf, type Config } from '../config/schema.js';

/** An account's Sandbox Service API credentials (contract sections 9 and 21), and where they are set. */
export interface AccountUpstream {
  account: string;
  baseUrl: string;
  apiKey: string;
  /** The setting of the key, for messages: BOXRELAY_UPSTREAM_API_KEY, or the account's `upstreamApiKey`. */
  apiKeySetting: string;
}

export type UpstreamConfig = Pick<Config, 'upstreamBaseUrl' | 'upstreamApiKey' | 'accounts'>;

/** Whether `name` is an account of the relay: `default`, or one configured. */
export const isAccount = (config: Pick<Config, 'accounts'>, name: string): boolean =>
  name === DEFAULT_ACCOUNT || config.accounts.some((account) => account.name === name);

/** The account's API credentials: `default`'s from BOXRELAY_UPSTREAM_*, another's from its own; undefined without them. */
export function accountUpstream(config: UpstreamConfig, name: string): AccountUpstream | undefined {
  if (name === DEFAULT_ACCOUNT) {
    const { upstreamBaseUrl: baseUrl, upstreamApiKey: apiKey } = config;
    return baseUrl === undefined || apiKey === undefined ? undefined : { account: name, baseUrl, apiKey, apiKeySetting: 'BOXRELAY_UPSTREAM_API_KEY' };
  }
  const account = config.accounts.find((a) => a.name === name);
  const baseUrl = account?.upstreamBaseUrl;
  const apiKey = account?.upstreamApiKey;
  return baseUrl === undefined || apiKey === undefined ? undefined : { account: name, baseUrl, apiKey, apiKeySetting: `the upstreamApiKey of account ${name}` };
}

/** Every account with API credentials, `default` first. */
export function accountUpstreams(config: UpstreamConfig): AccountUpstream[] {
  return accountNamesOf(config).flatMap((name) => accountUpstream(config, name) ?? []);
}
