import type { AccountConfig, Config, ConfigKey, HookConfig } from './schema.js';

/** What stands in for a secret in what `boxrelay config check` prints. */
const HIDDEN = '***';

/** Settings whose whole value is a credential. */
export const SECRET_SETTINGS = [
  'secrets',
  'natsToken',
  'natsPassword',
  'kafkaSaslPassword',
  'adminToken',
  'upstreamApiKey',
  'secretsEncryptionKey',
] as const satisfies readonly ConfigKey[];

const secretSettings: ReadonlySet<string> = new Set(SECRET_SETTINGS);

/** `scheme://user:password@` or `scheme://token@` anywhere in a value (a list of servers too). */
const USERINFO = /([a-z][a-z0-9+.-]*:\/\/)([^/?#@\s,]*)@/gi;
/** A query parameter whose name says it carries a credential (`?password=`, `&sslpassword=`, `&token=`). */
const CREDENTIAL_PARAMETER = /([?&][^=&#]*(?:pass|pwd|token|secret|key|auth|sig|cred)[^=&#]*=)[^&#]*/gi;

/**
 * A value with the credentials of any URL in it replaced: the password (a user alone may be a
 * token, as in `nats://token@host`, so it goes too) and credential query parameters.
 */
export function withoutCredentials(text: string): string {
  return text
    .replace(USERINFO, (_match, scheme: string, userinfo: string) => {
      const colon = userinfo.indexOf(':');
      return `${scheme}${colon === -1 ? HIDDEN : `${userinfo.slice(0, colon)}:${HIDDEN}`}@`;
    })
    .replace(CREDENTIAL_PARAMETER, `$1${HIDDEN}`);
}

/** Every string inside a value, mapped. */
function mapStrings(value: unknown, map: (text: string) => string): unknown {
  if (typeof value === 'string') return map(value);
  if (Array.isArray(value)) return value.map((item) => mapStrings(item, map));
  if (typeof value === 'object' && value !== null) return Object.fromEntries(Object.entries(value).map(([key, item]) => [key, mapStrings(item, map)]));
  return value;
}

/**
 * A hook as it may be shown: its URL's origin only (a chat webhook's path holds its token), and
 * its secret, routing key and header values hidden (headers are where a hook's credentials go).
 */
function shownHook(hook: HookConfig): unknown {
  const { origin, pathname, search } = new URL(hook.url);
  return {
    ...(mapStrings(hook, withoutCredentials) as HookConfig),
    url: pathname === '/' && search === '' ? hook.url : `${origin}/${HIDDEN}`,
    secret: hook.secret && HIDDEN,
    routingKey: hook.routingKey && HIDDEN,
    headers: Object.fromEntries(Object.keys(hook.headers).map((name) => [name, HIDDEN])),
  };
}

/** An account as it may be shown: its secrets and API key hidden, credentials in its URL too. */
function shownAccount(account: AccountConfig): unknown {
  return {
    ...(mapStrings(account, withoutCredentials) as AccountConfig),
    secrets: account.secrets.map(() => HIDDEN),
    upstreamApiKey: account.upstreamApiKey && HIDDEN,
  };
}

/** The effective settings with every secret, token, key and password replaced by `***`; unset ones left out. */
export function redactConfig(config: Config): Record<string, unknown> {
  const shown: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(config)) {
    if (value === undefined) continue;
    if (secretSettings.has(key)) shown[key] = mapStrings(value, () => HIDDEN);
    else if (key === 'hooks') shown[key] = config.hooks.map(shownHook);
    else if (key === 'accounts') shown[key] = config.accounts.map(shownAccount);
    else shown[key] = mapStrings(value, withoutCredentials);
  }
  return shown;
}
