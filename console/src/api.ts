const TOKEN_KEY = 'boxrelay.adminToken';

/** The admin token lives in this tab's sessionStorage only: never in a URL, a cookie or a log. */
export const session = {
  token: (): string | null => sessionStorage.getItem(TOKEN_KEY),
  signIn: (token: string): void => sessionStorage.setItem(TOKEN_KEY, token),
  signOut: (): void => sessionStorage.removeItem(TOKEN_KEY),
};

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

/** A call to the relay's own admin API (same origin), the token sent as a bearer token. */
export async function api<T>(method: 'GET' | 'POST' | 'DELETE', path: string, body?: unknown, token = session.token()): Promise<T> {
  if (token === null) throw new ApiError(401, 'unauthorized', 'not signed in');
  const headers: Record<string, string> = { Authorization: `Bearer ${token}`, Accept: 'application/json' };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const response = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    cache: 'no-store',
    credentials: 'omit',
  });
  if (response.status === 204) return undefined as T;
  const json = (await response.json().catch(() => null)) as { code?: string; message?: string } | null;
  if (!response.ok) throw new ApiError(response.status, json?.code ?? `http_${response.status}`, json?.message ?? response.statusText);
  return json as T;
}

/** A path with its query (after any it has already); empty values are left out. */
export function withQuery(path: string, query: Record<string, string | null | undefined>): string {
  const params = new URLSearchParams();
  for (const [name, value] of Object.entries(query)) if (value) params.set(name, value);
  const text = params.toString();
  return text === '' ? path : `${path}${path.includes('?') ? '&' : '?'}${text}`;
}

/** The account every relay has (contract section 21): the admin API's default for `account=`. */
export const DEFAULT_ACCOUNT = 'default';

/** The `account=` of an address: left out for `default`, the admin API's default. */
export const accountParam = (account: string): string | null => (account === DEFAULT_ACCOUNT ? null : account);

/** A box or an event: its id is the upstream's, unique within its account. */
export interface Item {
  id: string;
  account: string;
}

/**
 * The admin path of one box or event of an account (`account=`, left out for `default`). An id
 * `.` or `..` cannot be a path segment (the browser resolves it, `%2E%2E` too), so those two go
 * in the query (`/admin/boxes/?id=..`).
 */
export function itemPath(collection: 'boxes' | 'events', { id, account }: Item, rest = ''): string {
  const named = accountParam(account);
  return id === '.' || id === '..'
    ? withQuery(`/admin/${collection}/${rest}`, { id, account: named })
    : withQuery(`/admin/${collection}/${encodeURIComponent(id)}${rest}`, { account: named });
}

/**
 * A box or event named as the audit trail names it: the id, after `<account>:` for an account
 * other than `default` (how the relay keys them, src/store/account-keys.ts).
 */
export const auditKey = ({ id, account }: Item): string => (account === DEFAULT_ACCOUNT ? id : `${account}:${id}`);

export function itemOfAuditKey(key: string): Item {
  const colon = key.indexOf(':');
  return colon === -1 ? { id: key, account: DEFAULT_ACCOUNT } : { id: key.slice(colon + 1), account: key.slice(0, colon) };
}

/** An account as `GET /admin/accounts` lists it (contract section 21). */
export interface AccountRow {
  name: string;
  endpoint: string;
  secrets: number;
  lastDeliveryAt: string | null;
  events: number;
  boxes: number;
  reconcile: ReconcileStatus | null;
}

/** `GET /admin/reconcile`'s state of one account's reconciliation. */
export interface ReconcileStatus {
  running: boolean;
  last: { startedAt: string; finishedAt: string | null; outcome: string | null; boxesRepaired: number; error: string | null } | null;
}

export interface Page {
  nextCursor: string | null;
}

/** The admin API's Box (contract section 6); the timestamps are ISO 8601 strings. */
export type Box = Item & Record<'name' | 'state' | 'previousState' | 'stateChangedAt' | 'lastEventId' | 'hydratedAt', string | null>;

export interface CloudEvent extends Item {
  type: string;
  subject?: string;
  time: string;
  receivedAt: string;
  data: unknown;
}

export interface Delivery {
  sink: string;
  status: 'pending' | 'delivered' | 'dead_lettered' | 'discarded' | 'set_aside';
  attempts: number;
  lastError: string | null;
  updatedAt: string;
}

/** A hook's filter and transform as `GET /admin/hooks` shows them (contract section 17). */
export interface HookRow {
  name: string;
  events: string[];
  format: string;
  filter: string | null;
  transform: string | null;
  contentType: string | null;
}

/** The body a hook's transform makes of one event (`GET /admin/events/:id/bodies`). */
export interface TransformedBody {
  sink: string;
  skipped: boolean;
  contentType: string | null;
  body: string | null;
  error: { code: string; message: string } | null;
}

export type DeadLetter = { id: number; eventId: string; account: string; sink: string; attempts: number; lastError: string | null; failedAt: string };

export interface SinkRow {
  name: string;
  /** A bus's name (`nats`, `amqp`, `redis`, `mqtt`, `kafka`, `sqs`, `sns`, `s3`) or `hook`. */
  kind: string;
  up: boolean;
  paused: boolean;
  pending: number;
  /** Work waits for its turn under the hook's maxPerSecond. */
  throttled: boolean;
  deadLetters: number;
}

/** One attempt to deliver an event to a sink (contract section 16). */
export interface Attempt {
  sink: string;
  n: number;
  at: string;
  durationMs: number;
  outcome: 'delivered' | 'retried' | 'dead_lettered';
  status: number | null;
  error: { code: string; message: string } | null;
  request: { url: string; headers: Record<string, string> } | null;
  response: { headers: Record<string, string>; body: string; bodyTruncated: boolean } | null;
}

/** What the console reads of a sink's health over a window (contract section 16). */
export type SinkHealth = Record<'attempts' | 'delivered' | 'failed', number> &
  Record<'lastSuccessAt' | 'lastFailureAt', string | null> & {
    successRate: number | null;
    latencyMs: Record<'p50' | 'p95' | 'p99', number> | null;
    statuses: Record<string, number>;
    lastError: string | null;
  };

/** A sink's recorded attempts in one UTC minute, by outcome. */
export interface AttemptMinute {
  start: string;
  delivered: number;
  retried: number;
  dead_lettered: number;
}

/** An admin path under one sink, its name percent-encoded. */
export const sinkPath = (name: string, rest: string): string => `/admin/sinks/${encodeURIComponent(name)}/${rest}`;
