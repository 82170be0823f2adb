import { randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A local stand-in for the Sandbox Service webhook endpoints (sandbox-api-v1.md, "Account and setup",
 * "Errors", "Authentication"), and for the box list and box event histories that reconciliation
 * reads ("Boxes"). Where the document says "not shown" (list shape, success `type` values, codes for
 * a bad url/events, list query parameter names, history record shape), the choice made here is
 * marked, and the shapes are switchable so tests can prove the client does not depend on one guess.
 */

export const WEBHOOK_EVENTS = ['box.ready', 'box.hydrated', 'box.error', 'box.archived'] as const;
const MAX_ENDPOINTS = 10; // "Webhook endpoints per account"

export interface FakeWebhook {
  id: string;
  name: string;
  url: string;
  events: string[];
  createdAt: string;
  updatedAt: string;
}

export interface FakeShapes {
  /** Where GET /webhooks puts the list (not shown in the API document). */
  list: 'webhooks' | 'data' | 'items' | 'array';
  /** `nested`: `{ ok, type, webhook }` as documented; `top-level`: the fields beside `ok`/`type`. */
  webhook: 'nested' | 'top-level';
  /** Whether rotate returns the webhook beside `secret`. */
  rotateIncludesWebhook: boolean;
  /** DELETE's answer is not shown: a JSON 200 or an empty 204. */
  deleteStatus: 200 | 204;
}

/** Applied to the next `times` requests matching `method`/`path` (default: any request). */
export type Fault = { method?: string; path?: string | RegExp; times?: number } & (
  | { kind: 'error'; status: number; code?: string; message?: string; retryAfter?: string }
  /** Any status and body, e.g. a proxy's HTML page or a 200 with broken JSON. */
  | { kind: 'raw'; status: number; body: string; contentType?: string }
  /** Close the socket without answering; `afterProcessing` applies the request first (a lost response). */
  | { kind: 'drop'; afterProcessing: boolean }
  /** Hold the request this long, then handle it normally (client timeouts). */
  | { kind: 'delay'; ms: number }
  /** Hold the request until `until` settles (a request that hangs as long as a test wants), then handle it. */
  | { kind: 'hold'; until: Promise<unknown> }
);

/** A box of `GET /boxes` (the list item's documented fields that reconciliation reads). */
export interface FakeBox {
  id: string;
  name: string;
  state: string;
  updatedAt: string;
}

export interface LoggedRequest {
  method: string;
  path: string;
  /** The query string, without `?`. */
  query: string;
  /** Ms of arrival, by the fake's `now` (wall-clock by default). */
  at: number;
  authorization: string | undefined;
  body: unknown;
  /** What was answered: a status, or `dropped`. */
  outcome: number | 'dropped';
}

export interface FakeSandbox {
  /** Ends in `/v1`, without a trailing slash. */
  baseUrl: string;
  apiKey: string;
  shapes: FakeShapes;
  requests: LoggedRequest[];
  /** The endpoints with their current and earlier secrets, as the service holds them. */
  endpoints(): Array<FakeWebhook & { secret: string; previousSecrets: string[] }>;
  secretOf(id: string): string | undefined;
  inject(fault: Fault): void;
  /** Adds or replaces a box in `GET /boxes`. */
  setBox(box: FakeBox): void;
  deleteBox(id: string): void;
  /** Appends records to `GET /boxes/{id}/events`, as given (any shape, for bad-input tests). */
  addHistory(boxId: string, ...records: unknown[]): void;
  /**
   * Makes a list endpoint (`/v1/boxes` or `/v1/boxes/{id}/events`) answer pages with no items and a
   * new `nextCursor` every time, forever: a listing that never ends.
   */
  pageForever(path: string): void;
  /** Called as each request arrives (e.g. to move a test clock on per request). */
  onRequest(listener: (request: LoggedRequest) => void): void;
  /** The most requests the fake was answering at once (a run makes one at a time). */
  readonly maxInFlight: number;
  close(): Promise<void>;
}

export interface FakeSandboxOptions {
  apiKey?: string;
  shapes?: Partial<FakeShapes>;
  /** Items per page of the list endpoints when the request asks for more (default 200, the document's maximum). */
  pageSize?: number;
  /** The clock of each request's `at` (a test's manual clock); Date.now by default. */
  now?: () => number;
}

interface Stored {
  webhook: FakeWebhook;
  secret: string;
  previousSecrets: string[];
}

class HttpFailure {
  constructor(
    readonly status: number,
    readonly code: string,
    readonly message: string,
    readonly details?: Record<string, unknown>,
  ) {}
}

export async function startFakeSandbox(options: FakeSandboxOptions = {}): Promise<FakeSandbox> {
  const apiKey = options.apiKey ?? `box_${randomBytes(16).toString('hex')}`;
  const shapes: FakeShapes = { list: 'webhooks', webhook: 'nested', rotateIncludesWebhook: false, deleteStatus: 200, ...options.shapes };
  const store = new Map<string, Stored>();
  const faults: Array<Fault & { left: number }> = [];
  const requests: LoggedRequest[] = [];
  const boxes = new Map<string, FakeBox>();
  const histories = new Map<string, unknown[]>();
  const pageSize = options.pageSize ?? 200;
  const now = options.now ?? Date.now;
  const endless = new Set<string>();
  const listeners: ((request: LoggedRequest) => void)[] = [];
  let inFlight = 0;
  let maxInFlight = 0;
  let endlessPages = 0;
  let origin = '';

  const server = createServer((req, res) => {
    maxInFlight = Math.max(maxInFlight, ++inFlight);
    // Counted until the answer is sent (or the socket goes): the time the client waits for it.
    res.once('close', () => inFlight--);
    void handle(req, res).catch(() => res.destroy());
  });

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const text = await readBody(req);
    const method = req.method ?? 'GET';
    const url = new URL(req.url ?? '/', 'http://fake');
    const path = url.pathname;
    const entry: LoggedRequest = {
      method,
      path,
      query: url.search.slice(1),
      at: now(),
      authorization: req.headers.authorization,
      body: tryJson(text),
      outcome: 'dropped',
    };
    requests.push(entry);
    for (const listener of listeners) listener(entry);

    const fault = takeFault(method, path);
    if (fault?.kind === 'delay') await new Promise((resolve) => setTimeout(resolve, fault.ms));
    if (fault?.kind === 'hold') await fault.until.catch(() => undefined);
    if (fault?.kind === 'drop' && !fault.afterProcessing) return void res.socket?.destroy();
    if (fault?.kind === 'raw') {
      entry.outcome = fault.status;
      res.writeHead(fault.status, { 'content-type': fault.contentType ?? 'text/html' }).end(fault.body);
      return;
    }
    if (fault?.kind === 'error') {
      const headers: Record<string, string> = fault.retryAfter === undefined ? {} : { 'retry-after': fault.retryAfter };
      const failure = new HttpFailure(fault.status, fault.code ?? defaultCode(fault.status), fault.message ?? 'injected failure');
      entry.outcome = sendError(res, failure, headers);
      return;
    }

    let status: number;
    let body: unknown;
    try {
      if (req.headers.authorization !== `Bearer ${apiKey}`) throw new HttpFailure(401, 'unauthorized', 'Missing or invalid bearer token.');
      [status, body] = route(method, path, text, url.searchParams);
    } catch (error) {
      if (!(error instanceof HttpFailure)) throw error;
      const headers: Record<string, string> =
        error.status === 401 ? { 'www-authenticate': `Bearer resource_metadata="${origin}/.well-known/oauth-protected-resource"` } : {};
      if (fault?.kind === 'drop') return void res.socket?.destroy();
      entry.outcome = sendError(res, error, headers);
      return;
    }
    if (fault?.kind === 'drop') return void res.socket?.destroy(); // applied, but the answer never leaves
    entry.outcome = status;
    if (body === undefined) res.writeHead(status).end();
    else res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
  }

  /**
   * One page: `limit` (1..200) and an opaque `cursor` (the parameter names reconciliation assumes);
   * a limit outside 1..200 is refused as the document's "Page size" limit says.
   */
  function page(key: string, items: unknown[], query: URLSearchParams, path: string): Record<string, unknown> {
    const limit = Number(query.get('limit') ?? 50);
    if (!Number.isInteger(limit) || limit < 1 || limit > 200) throw new HttpFailure(400, 'invalid_request', 'limit must be 1..200.');
    if (endless.has(path)) return { [key]: [], pageInfo: { nextCursor: Buffer.from(`e:${++endlessPages}`).toString('base64url') } };
    const cursor = query.get('cursor');
    const offset = cursor === null ? 0 : Number(Buffer.from(cursor, 'base64url').toString('utf8').replace(/^o:/, ''));
    const size = Math.min(limit, pageSize);
    const next = offset + size < items.length ? Buffer.from(`o:${offset + size}`).toString('base64url') : null;
    return { [key]: items.slice(offset, offset + size), pageInfo: { nextCursor: next } };
  }

  function takeFault(method: string, path: string): Fault | undefined {
    const index = faults.findIndex(
      (f) =>
        (f.method === undefined || f.method === method) &&
        (f.path === undefined || (typeof f.path === 'string' ? f.path === path : f.path.test(path))),
    );
    const fault = faults[index];
    if (fault === undefined) return undefined;
    if (--fault.left <= 0) faults.splice(index, 1);
    return fault;
  }

  function route(method: string, path: string, text: string, query: URLSearchParams): [number, unknown] {
    if (path === '/v1/boxes' && method === 'GET') {
      return [200, { ok: true, type: 'box.list', ...page('boxes', [...boxes.values()].sort((a, b) => a.id.localeCompare(b.id)), query, path) }];
    }
    const events = /^\/v1\/boxes\/([^/]+)\/events$/.exec(path);
    if (events !== null && method === 'GET') {
      const id = decodeURIComponent(events[1] ?? '');
      if (!boxes.has(id)) throw new HttpFailure(404, 'not_found', 'Box does not exist.');
      // `type` for this list is this fake's choice: the document does not show the history's shape.
      return [200, { ok: true, type: 'box.events', ...page('events', histories.get(id) ?? [], query, path) }];
    }
    if (path === '/v1/webhooks') {
      if (method === 'GET') return [200, listBody([...store.values()].map((s) => s.webhook))];
      if (method === 'POST') return create(parseJson(text));
      throw methodNotAllowed();
    }
    const match = /^\/v1\/webhooks\/([^/]+)(\/rotate)?$/.exec(path);
    if (match === null) throw new HttpFailure(404, 'not_found', 'No such route.');
    const stored = store.get(match[1] ?? '');
    if (stored === undefined) throw new HttpFailure(404, 'not_found', 'Webhook endpoint does not exist.');
    if (match[2] !== undefined) {
      if (method !== 'POST') throw methodNotAllowed();
      stored.previousSecrets.unshift(stored.secret);
      stored.secret = newSecret();
      stored.webhook.updatedAt = new Date().toISOString();
      const extra = shapes.rotateIncludesWebhook ? webhookBody(stored.webhook) : {};
      return [200, { ok: true, type: 'webhook.rotated', ...extra, secret: stored.secret }];
    }
    if (method === 'GET') return [200, { ok: true, type: 'webhook.info', ...webhookBody(stored.webhook) }];
    if (method === 'PATCH') return update(stored, parseJson(text));
    if (method === 'DELETE') {
      store.delete(stored.webhook.id);
      return shapes.deleteStatus === 204 ? [204, undefined] : [200, { ok: true, type: 'webhook.deleted', id: stored.webhook.id }];
    }
    throw methodNotAllowed();
  }

  function create(input: Record<string, unknown>): [number, unknown] {
    const fields = validate(input, true);
    if (store.size >= MAX_ENDPOINTS) throw new HttpFailure(429, 'limit_reached', `At most ${MAX_ENDPOINTS} webhook endpoints per account.`);
    const now = new Date().toISOString();
    const webhook: FakeWebhook = { id: `wh_${randomBytes(12).toString('hex')}`, name: '', url: '', events: [], ...fields, createdAt: now, updatedAt: now };
    const stored: Stored = { webhook, secret: newSecret(), previousSecrets: [] };
    store.set(webhook.id, stored);
    return [201, { ok: true, type: 'webhook.created', ...webhookBody(webhook), secret: stored.secret }];
  }

  function update(stored: Stored, input: Record<string, unknown>): [number, unknown] {
    const fields = validate(input, false);
    if (Object.keys(fields).length === 0) throw new HttpFailure(400, 'no_changes', 'Give at least one of name, url, events.');
    Object.assign(stored.webhook, fields, { updatedAt: new Date().toISOString() });
    return [200, { ok: true, type: 'webhook.updated', ...webhookBody(stored.webhook) }];
  }

  /** `invalid_url`/`invalid_events` are this fake's choice: the document lists no codes for them. */
  function validate(input: Record<string, unknown>, required: boolean): Partial<Pick<FakeWebhook, 'name' | 'url' | 'events'>> {
    const out: Partial<Pick<FakeWebhook, 'name' | 'url' | 'events'>> = {};
    const { name, url, events } = input;
    if (name !== undefined || required) {
      if (typeof name !== 'string' || name.trim() === '') throw new HttpFailure(400, 'invalid_name', 'name must be a non-empty string.');
      out.name = name;
    }
    if (url !== undefined || required) {
      if (typeof url !== 'string' || !isHttps443(url)) throw new HttpFailure(400, 'invalid_url', 'url must be an HTTPS URL on port 443.', { field: 'url' });
      out.url = url;
    }
    if (events !== undefined || required) {
      const known: readonly string[] = WEBHOOK_EVENTS;
      if (!Array.isArray(events) || events.length === 0 || !events.every((e) => typeof e === 'string' && known.includes(e))) {
        throw new HttpFailure(400, 'invalid_events', `events must be a non-empty list of ${WEBHOOK_EVENTS.join(', ')}.`, { field: 'events' });
      }
      out.events = events as string[];
    }
    return out;
  }

  function webhookBody(webhook: FakeWebhook): Record<string, unknown> {
    return shapes.webhook === 'nested' ? { webhook: { ...webhook } } : { ...webhook };
  }

  function listBody(webhooks: FakeWebhook[]): unknown {
    const copies = webhooks.map((w) => ({ ...w }));
    return shapes.list === 'array' ? copies : { ok: true, type: 'webhook.list', [shapes.list]: copies };
  }

  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;

  return {
    baseUrl: `${origin}/v1`,
    apiKey,
    shapes,
    requests,
    endpoints: () => [...store.values()].map((s) => ({ ...s.webhook, secret: s.secret, previousSecrets: [...s.previousSecrets] })),
    secretOf: (id) => store.get(id)?.secret,
    inject: (fault) => void faults.push({ ...fault, left: fault.times ?? 1 }),
    setBox: (box) => void boxes.set(box.id, { ...box }),
    deleteBox: (id) => void (boxes.delete(id), histories.delete(id)),
    addHistory: (boxId, ...records) => void histories.set(boxId, [...(histories.get(boxId) ?? []), ...records]),
    pageForever: (path) => void endless.add(path),
    onRequest: (listener) => void listeners.push(listener),
    get maxInFlight() {
      return maxInFlight;
    },
    close: () =>
      new Promise<void>((resolve, reject) => {
        server.close((err) => (err ? reject(err) : resolve()));
        server.closeAllConnections(); // keep-alive sockets of the client would hold close() open
      }),
  };
}

/** The documented error body: top-level fields plus the nested `error` object. */
function sendError(res: ServerResponse, failure: HttpFailure, headers: Record<string, string>): number {
  const requestId = `req_${randomBytes(8).toString('hex')}`;
  const error = { code: failure.code, message: failure.message, status: failure.status, ...(failure.details ? { details: failure.details } : {}) };
  const body = { ok: false, type: 'box.error', status: failure.status, code: failure.code, message: failure.message, requestId, error };
  res.writeHead(failure.status, { 'content-type': 'application/json', ...headers }).end(JSON.stringify(body));
  return failure.status;
}

function defaultCode(status: number): string {
  if (status === 429) return 'rate_limited';
  if (status >= 500) return `http_${status}`;
  return 'invalid_request';
}

function methodNotAllowed(): HttpFailure {
  return new HttpFailure(405, 'method_not_allowed', 'Method not allowed.');
}

function newSecret(): string {
  return `whsec_${randomBytes(24).toString('base64')}`;
}

function isHttps443(text: string): boolean {
  try {
    const url = new URL(text);
    return url.protocol === 'https:' && url.port === '';
  } catch {
    return false;
  }
}

function parseJson(text: string): Record<string, unknown> {
  const value = tryJson(text);
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new HttpFailure(400, 'invalid_json', 'Body must be a JSON object.');
  return value as Record<string, unknown>;
}

function tryJson(text: string): unknown {
  try {
    return text === '' ? undefined : JSON.parse(text);
  } catch {
    return undefined;
  }
}

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}
