import { InvalidArgumentError } from 'commander';
import type { Clock } from '../clock.js';
import type { Config } from '../config/schema.js';
import { describeError, RelayError } from '../errors.js';
import type { Logger } from '../log.js';
import { BOX_EVENT_TYPES } from '../events/types.js';
import { DEFAULT_ACCOUNT } from '../config/default-account.js';
import { accountUpstream, type UpstreamConfig } from '../upstream/account-upstream.js';
import { openConfiguredDatabase } from './database.js';
import { createSecretsStore, type SecretsStore } from '../store/state/secrets-store.js';
import type { UpstreamClient, Webhook } from '../upstream/client.js';
import { createSecretCipher, type SecretCipher } from '../upstream/secret-cipher.js';

/**
 * `boxrelay upstream list|register|rotate [--account <name>]`: manage an account's webhook endpoint
 * at the Sandbox Service and keep the secrets it hands out in the database, as that account's
 * (contract section 21), where every replica reads them for that account's endpoint only.
 * Each command is a function of its dependencies so tests drive it in process; src/cli/program.ts only
 * builds the dependencies from the configuration.
 */

export class UpstreamNotConfiguredError extends RelayError {
  readonly code = 'upstream_not_configured';
  constructor(missing: string[], account = DEFAULT_ACCOUNT) {
    super(
      account === DEFAULT_ACCOUNT
        ? `the upstream commands need ${missing.join(' and ')} (the Sandbox Service API)`
        : `the upstream commands for account ${account} need its upstreamBaseUrl and upstreamApiKey (the Sandbox Service API)`,
    );
  }
}

/**
 * The secret was issued by the Sandbox Service but could not be stored: it has been printed so the
 * user can still deploy it, since it cannot be read back.
 */
export class SecretNotStoredError extends RelayError {
  readonly code = 'secret_not_stored';
}

/** The new secret is stored, but the earlier ones kept no expiry (they stay accepted). */
export class SecretsNotRetiredError extends RelayError {
  readonly code = 'secrets_not_retired';
}

/** The account's API credentials (`default`'s: BOXRELAY_UPSTREAM_*; another's: its own). */
export function upstreamSettings(
  config: Pick<Config, 'proxyEnv'> & UpstreamConfig,
  account = DEFAULT_ACCOUNT,
): {
  baseUrl: string;
  apiKey: string;
  proxyEnv: Config['proxyEnv'];
} {
  const credentials = accountUpstream(config, account);
  if (credentials === undefined) {
    const missing = [config.upstreamBaseUrl === undefined && 'BOXRELAY_UPSTREAM_BASE_URL', config.upstreamApiKey === undefined && 'BOXRELAY_UPSTREAM_API_KEY'];
    throw new UpstreamNotConfiguredError(missing.filter((name): name is string => name !== false), account);
  }
  return { baseUrl: credentials.baseUrl, apiKey: credentials.apiKey, proxyEnv: config.proxyEnv };
}

export interface UpstreamSecrets {
  secrets: SecretsStore;
  cipher: SecretCipher;
  close(): Promise<void>;
}

/** The database as `serve` sees it (migrated), for the commands that store the account's secrets. */
export async function openUpstreamSecrets(config: Config, clock: Clock, logger: Logger, account = DEFAULT_ACCOUNT): Promise<UpstreamSecrets> {
  const cipher = createSecretCipher(config.secretsEncryptionKey);
  const { database } = await openConfiguredDatabase(config);
  return { secrets: createSecretsStore({ db: database.kysely, account, cipher, clock, logger }), cipher, close: () => database.close() };
}

export interface UpstreamDeps {
  /** The account whose endpoint and secrets these are (default `default`). */
  account?: string;
  client: UpstreamClient;
  /** One line of standard output. */
  print(line: string): void;
}

export interface UpstreamStoreDeps extends UpstreamDeps {
  /** Keeps the account's secrets. */
  secrets: SecretsStore;
  cipher: SecretCipher;
  clock: Clock;
  /** Where the relay may hold the account's secrets besides the database, for the rotation note: `default`'s settings, or the account's own. */
  config: Pick<Config, 'secrets' | 'secretsFile'>;
}

/** `--events`: comma-separated; the short form (`ready`) is accepted as the upstream's own CLI does. */
export function parseEvents(text: string | undefined): string[] {
  if (text === undefined) return [...BOX_EVENT_TYPES];
  const events = text
    .split(',')
    .map((e) => e.trim())
    .filter(Boolean)
    .map((e) => (e.includes('.') ? e : `box.${e}`));
  if (events.length === 0) throw new InvalidArgumentError('expected at least one event type');
  return [...new Set(events)];
}

export async function listWebhooks({ account = DEFAULT_ACCOUNT, client, print }: UpstreamDeps): Promise<Webhook[]> {
  const webhooks = await client.listWebhooks();
  if (webhooks.length === 0) {
    const register = account === DEFAULT_ACCOUNT ? '--url <public relay URL>' : `--account ${account} --url <public URL of the relay's /webhooks/${account}>`;
    print(`no webhook endpoints; create one with \`boxrelay upstream register ${register}\``);
    return webhooks;
  }
  const rows = [['ID', 'NAME', 'URL', 'EVENTS'], ...webhooks.map((w) => [w.id, w.name ?? '', w.url, w.events.join(',')])];
  const widths = [0, 1, 2].map((column) => Math.max(...rows.map((row) => (row[column] ?? '').length)));
  for (const row of rows) print(row.map((cell, column) => cell.padEnd(widths[column] ?? 0)).join('  ').trimEnd());
  return webhooks;
}

export interface RegisterOptions {
  url: string;
  events: string[];
  name: string;
}

/** Creates the endpoint, stores its secret, and prints the secret once: the user asked for it here. */
export async function registerWebhook(deps: UpstreamStoreDeps, options: RegisterOptions): Promise<{ webhook: Webhook; secretId: number }> {
  const { webhook, secret } = await deps.client.createWebhook(options);
  const secretId = await storeOrPrint(deps, webhook.id, secret);
  deps.print(`registered webhook ${webhook.id} (${webhook.name ?? options.name}): ${webhook.url} for ${webhook.events.join(', ')}`);
  deps.print(`its signing secret is stored in the database${atRest(deps.cipher)}; every replica accepts it${atEndpoint(deps)}.`);
  deps.print('The secret, shown this once (the Sandbox Service never shows it again; keep a copy only if you need one elsewhere):');
  deps.print(secret);
  return { webhook, secretId };
}

export interface RotateOptions {
  graceMs: number;
  /** As typed, for the message. */
  graceText: string;
  showSecret: boolean;
}

/**
 * Rotates the endpoint's secret. The new one is stored first, then the webhook's earlier database
 * secrets get an expiry of now + grace: at every moment each replica accepts the secret the upstream
 * signs with, and the old one keeps working for deliveries already signed or in retry.
 */
export async function rotateWebhook(
  deps: UpstreamStoreDeps,
  webhookId: string,
  options: RotateOptions,
): Promise<{ secretId: number; retired: number; expiresAt: number }> {
  const { secret } = await deps.client.rotateWebhook(webhookId);
  const secretId = await storeOrPrint(deps, webhookId, secret);
  const expiresAt = deps.clock.now() + options.graceMs;
  const until = new Date(expiresAt).toISOString();
  deps.print(`rotated webhook ${webhookId}: the new secret is stored in the database${atRest(deps.cipher)}; every replica reads it at the first delivery signed with it.`);

  let retired: number;
  try {
    retired = await deps.secrets.retire(webhookId, { except: secretId, at: expiresAt });
  } catch (error) {
    throw new SecretsNotRetiredError(
      `the earlier database secrets of ${webhookId} could not be given an expiry (${describeError(error, { secret })}); they stay accepted ` +
        `until you run: UPDATE secrets SET expires_at = ${expiresAt} WHERE account = '${deps.account ?? DEFAULT_ACCOUNT}' AND webhook_id = '${webhookId}' AND id <> ${secretId}`,
      { cause: error },
    );
  }
  if (retired > 0) {
    deps.print(`${retired} earlier database secret(s) of ${webhookId} stay accepted until ${until} (grace ${options.graceText}), then are refused.`);
  } else {
    const places = placesOf(deps);
    deps.print(`No earlier secret of ${webhookId} in the database was still accepted past ${until}.`);
    deps.print(
      places === undefined
        ? 'If deliveries were verified with its old secret elsewhere, keep that secret there until then.'
        : `If its old secret is in ${places}, keep it there until ${until} (grace ${options.graceText}), then remove it` +
            (deps.config.secretsFile ? `; in the secrets file, writing that time after it makes the relay refuse it from then on.` : '.'),
    );
  }
  if (options.showSecret) deps.print(`new secret (--show-secret): ${secret}`);
  return { secretId, retired, expiresAt };
}

/** Storing failed after the upstream issued the secret: printing it is the only way not to lose it. */
async function storeOrPrint(deps: UpstreamStoreDeps, webhookId: string, secret: string): Promise<number> {
  try {
    return await deps.secrets.add({ value: secret, webhookId });
  } catch (error) {
    deps.print(`The Sandbox Service issued this secret for ${webhookId}, but it could not be stored in the database:`);
    deps.print(secret);
    throw new SecretNotStoredError(
      `secret of ${webhookId} not stored (${describeError(error, { secret })}): put the secret printed above into ${settingsOf(deps).join(' or ')} ` +
        'of every replica now; the upstream already signs with it',
      { cause: error },
    );
  }
}

function atRest(cipher: SecretCipher): string {
  return cipher.enabled ? ' (encrypted)' : ' (unencrypted: set BOXRELAY_SECRETS_ENCRYPTION_KEY to encrypt it at rest)';
}

/** Where the account's secrets are set besides the database: `default`'s variables, or the account's keys in the accounts file. */
function settingsOf({ account = DEFAULT_ACCOUNT }: Pick<UpstreamStoreDeps, 'account'>): [list: string, file: string] {
  return account === DEFAULT_ACCOUNT ? ['BOXRELAY_SECRETS', 'the secrets file'] : [`the secrets of account ${account}`, `its secretsFile`];
}

function placesOf(deps: Pick<UpstreamStoreDeps, 'account' | 'config'>): string | undefined {
  const [list, file] = settingsOf(deps);
  const places = [deps.config.secrets.length > 0 && list, deps.config.secretsFile !== undefined && `${file} (${deps.config.secretsFile})`];
  const named = places.filter((p): p is string => p !== false);
  return named.length === 0 ? undefined : named.join(' or ');
}

/** For an account beside `default`: the endpoint whose deliveries its secrets verify. */
function atEndpoint({ account = DEFAULT_ACCOUNT }: Pick<UpstreamStoreDeps, 'account'>): string {
  return account === DEFAULT_ACCOUNT ? '' : ` for /webhooks/${account} only`;
}
