import pRetry from 'p-retry';
import { z } from 'zod';
import { createEgressDispatcher, fetchThrough } from '../egress/dispatcher.js';
import type { ProxyEnv } from '../egress/proxy-env.js';
import { errorCodeOf } from '../errors.js';
import { untrusted } from '../log.js';
import { parseIsoWithZone } from '../iso-time.js';
import { isRecord } from '../json.js';
import { parseRetryAfter, waitRestOfRetryAfter } from '../retry-after.js';
import { realWait, systemClock, type Clock, type Wait } from '../clock.js';
import {
  InvalidWebhookIdError,
  UpstreamApiError,
  UpstreamError,
  UpstreamInvalidResponseError,
  UpstreamResponseLostError,
  UpstreamUnreachableError,
} from './errors.js';

/**
 * Client of the Sandbox Service webhook endpoints (sandbox-api-v1.md, "Account and setup"), and of
 * the box list and box event history that reconciliation reads (contract section 9).
 * Only GETs are retried: a repeated POST /webhooks creates a second endpoint, a repeated
 * rotate throws away the secret of the first, so a POST whose answer is lost is reported, not retried.
 */

export const WEBHOOK_ID_PATTERN = /^wh_[a-f0-9]{24}$/;

// The API document fixes the fields but not every envelope, so parsing is loose: unknown fields are
// kept, and only what the relay relies on is required.
const webhookSchema = z.looseObject({
  id: z.string().min(1),
  name: z.string().optional(),
  url: z.string(),
  events: z.array(z.string()),
  createdAt: z.string().optional(),
  updatedAt: z.string().optional(),
});
export type Webhook = z.infer<typeof webhookSchema>;

export interface CreateWebhookInput {
  name: string;
  url: string;
  /** Full `box.` form, at least one. */
  events: string[];
}

/** The most items a list page may hold ("Limits": page size 1 to 200). */
export const PAGE_LIMIT = 200;

// Only what reconciliation relies on is required; `updatedAt` must be a time it can compare.
const boxSchema = z.looseObject({
  id: z.string().min(1),
  name: z.string().optional().catch(undefined),
  state: z.string().min(1),
  updatedAt: z.string().refine((text) => parseIsoWithZone(text) !== undefined, 'not an ISO-8601 time with a zone'),
});
export type UpstreamBox = z.infer<typeof boxSchema>;

export interface Page<T> {
  items: T[];
  /** Absent or null in the answer: the last page. */
  nextCursor: string | undefined;
}

export interface UpstreamClientOptions {
  /** The v1 root, e.g. `https://api.example.com/v1`; a trailing `/` is fine. */
  baseUrl: string;
  apiKey: string;
  /** HTTPS_PROXY, HTTP_PROXY and NO_PROXY (contract section 14); absent: straight. */
  proxyEnv?: ProxyEnv | undefined;
  /** Replaces the proxy-aware fetch (tests, a throttle around it). */
  fetch?: typeof fetch;
  /** Per attempt, including reading the body. Default 10 s. */
  timeoutMs?: number;
  /** Retries of a GET after the first attempt. Default 3. */
  retries?: number;
  /** Backoff base (ms), doubled per retry. Default 500. */
  minTimeout?: number;
  maxTimeout?: number;
  /** Jitter: multiplies each backoff by a random factor in [1, 2). Default true. */
  randomize?: boolean;
  /** A `Retry-After` longer than this is not waited for: the error is returned at once. Default 60 s. */
  maxRetryAfterMs?: number;
  /** Reads a `Retry-After` date, and waits out what it asks beyond the backoff (tests move their clock). */
  clock?: Clock;
  wait?: Wait;
  /** Called before each retry, e.g. to log it. */
  onRetry?: (info: { operation: string; attempt: number; error: UpstreamError }) => void;
  /** A response body over this is refused unread. Default 10 MB. */
  maxResponseBytes?: number;
  /** Aborts requests and retry waits under way (the relay is stopping). */
  signal?: AbortSignal;
}

export interface UpstreamClient {
  listWebhooks(): Promise<Webhook[]>;
  createWebhook(input: CreateWebhookInput): Promise<{ webhook: Webhook; secret: string }>;
  rotateWebhook(id: string): Promise<{ webhook?: Webhook; secret: string }>;
  /**
   * `GET /boxes?limit=200[&cursor=]` (parameter names assumed: the document does not name them);
   * `signal` cuts the request and its retry waits short (a reconciliation run that must stop).
   */
  listBoxes(cursor?: string, signal?: AbortSignal): Promise<Page<UpstreamBox>>;
  /** `GET /boxes/{boxId}/events`, same paging; records unparsed (their shape is not documented). */
  listBoxEvents(boxId: string, cursor?: string, signal?: AbortSignal): Promise<Page<unknown>>;
}

type Method = 'GET' | 'POST';
interface Call {
  method: Method;
  path: string;
  body?: unknown;
  /** For a POST: what to check when the answer is lost. */
  lostGuidance?: string;
  /** Besides the client's own: ends this call's request and retry waits. */
  signal?: AbortSignal | undefined;
}
interface Answer {
  status: number;
  body: unknown;
  operation: string;
}

// Failures that happen before a single byte of the request can reach the service: safe to report as
// "unreachable" even for a POST. Anything else (reset, timeout) leaves the outcome unknown.
const NOT_SENT_CODES = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH', 'UND_ERR_CONNECT_TIMEOUT']);
// Quota limits: waiting a few seconds will not lift them.
const QUOTA_CODES = new Set(['daily_limit_reached', 'limit_reached', 'member_limit_reached']);

/** fetch to the upstream API through the proxy the variables name for it, if any. */
export const upstreamFetch = (proxyEnv: ProxyEnv = {}): typeof fetch => fetchThrough(createEgressDispatcher({ kind: 'env', env: proxyEnv }));

export function createUpstreamClient(options: UpstreamClientOptions): UpstreamClient {
  const root = parseBaseUrl(options.baseUrl);
  const apiKey = options.apiKey;
  // fetch puts an invalid header value into its error message: refuse such a key up front instead.
  if (!/^[\x21-\x7e]+$/.test(apiKey)) throw new TypeError('upstream API key is empty or contains spaces or control characters');
  const host = new URL(root).host;
  const fetchImpl = options.fetch ?? upstreamFetch(options.proxyEnv);
  const timeoutMs = options.timeoutMs ?? 10_000;
  const retryOptions = {
    retries: options.retries ?? 3,
    minTimeout: options.minTimeout ?? 500,
    maxTimeout: options.maxTimeout ?? 10_000,
    factor: 2,
    randomize: options.randomize ?? true,
  };
  const maxRetryAfterMs = options.maxRetryAfterMs ?? 60_000;
  const { clock = systemClock, wait = realWait } = options;
  const maxResponseBytes = options.maxResponseBytes ?? 10 * 1024 * 1024;

  const sanitize = (text: string): string =>
    untrusted(
      text
        .split(apiKey)
        .join('[redacted]')
        .replace(/Bearer\s+\S+/gi, 'Bearer [redacted]')
        .replace(/whsec_[A-Za-z0-9+/=_-]*/g, 'whsec_[redacted]')
        .replace(/\s+/g, ' ')
        .trim(),
      300,
    );

  const sanitizeOptional = (text: string | undefined) => (text === undefined ? undefined : sanitize(text));

  /** The client's signal and the call's, whichever there are. */
  const signalOf = (call: Call): AbortSignal | undefined => {
    const signals = [options.signal, call.signal].filter((s) => s !== undefined);
    return signals.length > 1 ? AbortSignal.any(signals) : signals[0];
  };

  async function send(call: Call): Promise<Answer> {
    const operation = operationOf(call);
    const signal = signalOf(call);
    let response: Response;
    let text: string | undefined;
    try {
      response = await fetchImpl(root + call.path, {
        method: call.method,
        headers: {
          authorization: `Bearer ${apiKey}`,
          accept: 'application/json',
          ...(call.body === undefined ? {} : { 'content-type': 'application/json' }),
        },
        body: call.body === undefined ? undefined : JSON.stringify(call.body),
        // A redirect would carry the bearer token elsewhere and turn a POST into a GET: surface it instead.
        redirect: 'manual',
        signal: signal ? AbortSignal.any([AbortSignal.timeout(timeoutMs), signal]) : AbortSignal.timeout(timeoutMs),
      });
      text = await readCapped(response, maxResponseBytes);
    } catch (err) {
      const failure = transportFailure(err, timeoutMs);
      failure.reason += ` at ${host}`; // a wrong base URL is the usual cause: show where it went
      if (call.lostGuidance !== undefined && !failure.surelyNotSent) {
        throw new UpstreamResponseLostError(operation, failure.reason, call.lostGuidance, { cause: err });
      }
      throw new UpstreamUnreachableError(operation, failure.reason, { cause: err });
    }
    if (text === undefined) {
      throw new UpstreamInvalidResponseError(operation, response.status, `body over ${maxResponseBytes} bytes`, call.lostGuidance);
    }
    if (response.status < 200 || response.status > 299) throw apiError(operation, response, text);
    if (text.trim() === '') return { status: response.status, body: undefined, operation };
    try {
      return { status: response.status, body: JSON.parse(text) as unknown, operation };
    } catch {
      throw new UpstreamInvalidResponseError(operation, response.status, 'body is not JSON', call.lostGuidance);
    }
  }

  function apiError(operation: string, response: Response, text: string): UpstreamApiError {
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch {
      body = undefined; // a proxy's HTML page, say: the status still tells what happened
    }
    const parsed = errorBodySchema.safeParse(body);
    const fields = parsed.success ? parsed.data : {};
    const nested = typeof fields.error === 'object' ? fields.error : undefined;
    const code = fields.code ?? nested?.code ?? (typeof fields.error === 'string' ? fields.error : undefined);
    const message = fields.message ?? nested?.message ?? (response.statusText || 'no message');
    return new UpstreamApiError({
      operation,
      status: response.status,
      upstreamCode: sanitize(code ?? `http_${response.status}`),
      upstreamMessage: sanitize(body === undefined && text.trim() !== '' ? `${message} (non-JSON body)` : message),
      requestId: sanitizeOptional(fields.requestId ?? response.headers.get('x-request-id') ?? undefined),
      details: nested?.details,
      retryAfterMs: parseRetryAfter(response.headers.get('retry-after'), clock.now()),
    });
  }

  /** GET: retried with jittered backoff on 408/429/5xx and connection failures. */
  function sendIdempotent(call: Call): Promise<Answer> {
    const operation = operationOf(call);
    const signal = signalOf(call);
    return pRetry(
      () => send(call),
      {
        ...retryOptions,
        ...(signal ? { signal } : {}),
        shouldRetry: async ({ error, attemptNumber, retriesConsumed }) => {
          if (!isRetryable(error)) return false;
          const retryAfterMs = error instanceof UpstreamApiError ? error.retryAfterMs : undefined;
          if (retryAfterMs !== undefined && retryAfterMs > maxRetryAfterMs) return false;
          await waitRestOfRetryAfter(retryAfterMs, retryOptions, retriesConsumed, signal, wait);
          options.onRetry?.({ operation, attempt: attemptNumber + 1, error: error as UpstreamError });
          return true;
        },
      },
    );
  }

  function parse<S extends z.ZodType>(schema: S, value: unknown, answer: Answer, guidance?: string): z.infer<S> {
    const result = schema.safeParse(value);
    if (result.success) return result.data;
    // Paths and issue kinds only: zod messages or values could echo a secret from the body.
    const where = result.error.issues
      .slice(0, 3)
      .map((issue) => `${issue.path.join('.') || 'body'} (${issue.code})`)
      .join(', ');
    throw new UpstreamInvalidResponseError(answer.operation, answer.status, `unexpected shape at ${where}`, guidance);
  }

  return {
    async listWebhooks() {
      const answer = await sendIdempotent({ method: 'GET', path: '/webhooks' });
      return parse(z.array(webhookSchema), pickList(answer.body), answer);
    },

    async createWebhook(input) {
      const guidance =
        'Run `boxrelay upstream list` to see whether the endpoint was created before trying again; ' +
        'if it was, its secret cannot be read back: rotate it with `boxrelay upstream rotate <id>` or delete it.';
      const body = { name: input.name, url: input.url, events: input.events };
      const answer = await send({ method: 'POST', path: '/webhooks', body, lostGuidance: guidance });
      const webhook = withoutSecret(parse(webhookSchema, pickWebhook(answer.body), answer, guidance));
      const secret = parse(secretSchema, pickSecret(answer.body), answer, guidance);
      return { webhook, secret };
    },

    async rotateWebhook(id) {
      const path = `/webhooks/${checkId(id, apiKey)}/rotate`;
      const guidance =
        `Run \`boxrelay upstream list\` to see whether ${id} was rotated (a newer updatedAt) before trying again; ` +
        `a lost secret cannot be read back, so if in doubt rotate again with \`boxrelay upstream rotate ${id}\`.`;
      const answer = await send({ method: 'POST', path, lostGuidance: guidance });
      const secret = parse(secretSchema, pickSecret(answer.body), answer, guidance);
      // The document only promises `secret`; a webhook object beside it is a bonus, never a failure.
      const webhook = webhookSchema.safeParse(pickWebhook(answer.body));
      return webhook.success ? { webhook: withoutSecret(webhook.data), secret } : { secret };
    },

    async listBoxes(cursor, signal) {
      const answer = await sendIdempotent({ method: 'GET', path: `/boxes${pageQuery(cursor)}`, signal });
      return parse(pageSchema('boxes', boxSchema), answer.body, answer);
    },

    async listBoxEvents(boxId, cursor, signal) {
      const answer = await sendIdempotent({ method: 'GET', path: `/boxes/${encodeURIComponent(boxId)}/events${pageQuery(cursor)}`, signal });
      return parse(pageSchema('events', z.unknown()), answer.body, answer);
    },
  };
}

/** `GET /boxes`: the query (page size, cursor) says nothing a reader of an error needs. */
const operationOf = (call: Call): string => `${call.method} ${call.path.split('?')[0]}`;

const pageQuery = (cursor: string | undefined): string =>
  `?limit=${PAGE_LIMIT}${cursor === undefined ? '' : `&cursor=${encodeURIComponent(cursor)}`}`;

/** A list body: the items under `key` (at most a page), and `pageInfo.nextCursor`. */
function pageSchema<T extends z.ZodType>(key: string, item: T): z.ZodType<Page<z.infer<T>>> {
  const pageInfo = z.looseObject({ nextCursor: z.string().min(1).nullish() }).nullish();
  return z
    .looseObject({ [key]: z.array(item).max(PAGE_LIMIT), pageInfo })
    .transform((body) => ({
      items: body[key] as z.infer<T>[],
      nextCursor: (body.pageInfo as z.infer<typeof pageInfo>)?.nextCursor ?? undefined,
    }));
}

/** The body as text, or undefined when it is longer than `maxBytes` (the rest is not read). */
async function readCapped(response: Response, maxBytes: number): Promise<string | undefined> {
  if (Number(response.headers.get('content-length') ?? 0) > maxBytes) {
    await response.body?.cancel();
    return undefined;
  }
  const chunks: Uint8Array[] = [];
  let size = 0;
  for await (const chunk of response.body ?? []) {
    size += chunk.byteLength;
    if (size > maxBytes) return undefined; // leaving the loop cancels the stream
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString('utf8');
}

const secretSchema = z.string().min(1);

const optionalText = z.string().optional().catch(undefined);
// sandbox-api-v1.md "Errors": top-level code/message/requestId plus a nested `error` object; OAuth
// endpoints use `{error: <code>}`. Any field may be missing or malformed without hiding the status.
const errorBodySchema = z.looseObject({
  code: optionalText,
  message: optionalText,
  requestId: optionalText,
  error: z
    .union([z.string(), z.looseObject({ code: optionalText, message: optionalText, details: z.unknown().optional() })])
    .optional()
    .catch(undefined),
});

/** The webhook sits under `webhook` or at the top level. */
function pickWebhook(body: unknown): unknown {
  return isRecord(body) && isRecord(body.webhook) ? body.webhook : body;
}

/** The list shape is not documented: a bare array, or under `webhooks`, `data` or `items` (once nested). */
function pickList(body: unknown, depth = 0): unknown {
  if (Array.isArray(body)) return body;
  if (!isRecord(body)) return body;
  for (const key of ['webhooks', 'data', 'items']) {
    const value = body[key];
    if (Array.isArray(value)) return value;
    if (depth === 0 && isRecord(value)) return pickList(value, 1);
  }
  return body;
}

function pickSecret(body: unknown): unknown {
  if (!isRecord(body)) return undefined;
  return body.secret ?? (isRecord(body.webhook) ? body.webhook.secret : undefined);
}

/** The secret is handed back separately, so a webhook object can be logged or printed safely. */
function withoutSecret(webhook: Webhook): Webhook {
  const { secret: _secret, ...rest } = webhook;
  return rest as Webhook;
}

function checkId(id: string, apiKey: string): string {
  if (typeof id === 'string' && WEBHOOK_ID_PATTERN.test(id)) return id;
  const text = String(id);
  const looksSecret = text.includes('whsec_') || text.includes(apiKey);
  throw new InvalidWebhookIdError(looksSecret ? '(value hidden: it looks like a secret)' : JSON.stringify(untrusted(text, 40)));
}

function parseBaseUrl(baseUrl: string): string {
  let url: URL;
  try {
    url = new URL(baseUrl);
  } catch {
    throw new TypeError('upstream base URL is not a valid URL');
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') throw new TypeError('upstream base URL must be http(s)');
  if (url.username || url.password) throw new TypeError('upstream base URL must not carry credentials');
  // Paths are appended as text: `new URL('webhooks', base)` would drop `/v1` when base lacks a trailing slash.
  return url.origin + url.pathname.replace(/\/+$/, '');
}

function isRetryable(error: unknown): boolean {
  if (error instanceof UpstreamUnreachableError) return true;
  if (!(error instanceof UpstreamApiError)) return false;
  if (error.status === 429) return !QUOTA_CODES.has(error.upstreamCode);
  return error.status === 408 || error.status >= 500;
}

/** Why no answer came, in the upstream errors' words, and whether the request surely never left. */
function transportFailure(err: unknown, timeoutMs: number): { reason: string; surelyNotSent: boolean } {
  if (err instanceof Error && (err.name === 'TimeoutError' || err.name === 'AbortError')) {
    return { reason: `no answer within ${timeoutMs} ms`, surelyNotSent: false };
  }
  const code = errorCodeOf(err);
  if (code === undefined) return { reason: 'connection failed', surelyNotSent: false };
  const beforeSending = NOT_SENT_CODES.has(code) || /CERT|TLS|SSL/.test(code);
  return { reason: `connection failed: ${code}`, surelyNotSent: beforeSending };
}
