import type { Clock } from '../clock.js';
import type { HookConfig } from '../config/schema.js';
import { readFileSync } from 'node:fs';
import { Webhook } from 'standardwebhooks';
import { createEgressDispatcher, fetchThrough } from '../egress/dispatcher.js';
import { proxyRouteOf, type ProxyEnv } from '../egress/proxy-env.js';
import { readTlsFiles } from '../egress/tls-files.js';
import { receiverId, type CloudEvent } from '../events/cloudevent.js';
import { describeError } from '../errors.js';
import { parseRetryAfter } from '../retry-after.js';
import { standardWebhooksKey } from '../verify/secrets.js';
import {
  HookConnectionError,
  HookRejectedError,
  HookRequestInvalidError,
  HookTimeoutError,
  HookUnavailableError,
  SinkFailure,
  SinkStoppingError,
  eventJson,
} from './failures.js';
import { readCappedBody } from './capped-body.js';
import type { ExchangeRequest } from '../exchange.js';
import type { Exchange, Sink } from './sink.js';
import { withRateGate } from './rate-gate.js';
import { slackBody } from './slack.js';
import { TransformFailedError, hookTransformOf, type HookTransform, type TransformedBody } from './transform.js';

export interface HttpHookOptions {
  hook: HookConfig;
  clock: Clock;
  /** HTTPS_PROXY, HTTP_PROXY and NO_PROXY, for a hook without its own `proxy`. */
  proxyEnv?: ProxyEnv | undefined;
  /** Replaces the proxy and TLS dispatcher (tests). */
  fetch?: typeof fetch;
  /** Replaces the hook's compiled transform (tests count its evaluations). */
  transform?: HookTransform | undefined;
  /** The hook's transform failed on an event (counted once per event: it is a dead letter at once). */
  onTransformError?: ((sink: string, error: TransformFailedError) => void) | undefined;
}

/** The hook's TLS files, read again where the sink runs (`loadConfig` checked them already). */
function tlsOf(hook: HookConfig) {
  if (!hook.tls) return {};
  const { material, problems } = readTlsFiles(hook.name, hook.tls, (path) => readFileSync(path, 'utf8'));
  if (problems.length > 0) throw new Error(problems.join('; '));
  return material;
}

/** What an operator may read of a request: configured extra headers' values redacted, no signature. */
function requestRecord(url: string, headers: Headers, extra: ReadonlySet<string>): ExchangeRequest {
  const shown: Record<string, string> = {};
  for (const [name, value] of headers) {
    if (name !== 'webhook-signature') shown[name] = extra.has(name) ? '[redacted]' : value;
  }
  return { url, headers: shown };
}

/**
 * The body of each event for this hook: the CloudEvent, the Slack text, or what its transform (its
 * own or its built-in format's) gives, null to send nothing. A transform runs once per event, not
 * per attempt: its result (or failure) is kept with the event, which attempts and retries share.
 */
function hookBodies(hook: HookConfig, transform: HookTransform | undefined, onError: (error: TransformFailedError) => void): (event: CloudEvent) => TransformedBody | null {
  if (transform === undefined) {
    const contentType = hook.contentType ?? (hook.format === 'slack' ? 'application/json' : 'application/cloudevents+json');
    return (event) => ({ body: hook.format === 'slack' ? slackBody(event) : eventJson(event), contentType });
  }
  const made = new WeakMap<CloudEvent, TransformedBody | null | TransformFailedError>();
  return (event) => {
    let result = made.get(event);
    if (result === undefined) {
      // The JSON's length bounds the event's sizes and the body's (made once per event for all sinks).
      const size = eventJson(event).length;
      try {
        result = transform.bodyOf(event, size);
      } catch (error) {
        result = error instanceof TransformFailedError ? error : new TransformFailedError(describeError(error));
        onError(result);
      }
      made.set(event, result);
    }
    if (result instanceof TransformFailedError) throw result;
    return result;
  };
}

/** 408, 429 and 5xx may pass on another try; any other non-2xx answer will not. */
const retryableStatus = (status: number) => status === 408 || status === 429 || status >= 500;

/**
 * One outgoing HTTP hook (contract section 5): one POST per attempt, signed as Standard Webhooks
 * when a secret is set. `webhook-id` is the event id, stable across retries, so receivers dedupe.
 */
export function createHttpHookSink({ hook, clock, proxyEnv = {}, fetch: injected, transform = hookTransformOf(hook), onTransformError }: HttpHookOptions): Sink {
  const bodyOf = hookBodies(hook, transform, (error) => onTransformError?.(hook.name, error));
  // Proxy (the hook's, the variables', or none) and TLS (private CA, client certificate) per hook.
  const dispatcher = injected ? undefined : createEgressDispatcher(proxyRouteOf(hook.proxy, proxyEnv), tlsOf(hook));
  const fetchFn = injected ?? fetchThrough(dispatcher!);
  // undici refuses a second close; a relay may be stopped twice.
  let closed: Promise<void> | undefined;
  // The secret's key as the schema decoded it (`whsec_<base64>`), given raw: one decoder of secrets.
  const key = hook.secret === undefined ? undefined : standardWebhooksKey(hook.secret);
  const signer = key && new Webhook(key, { format: 'raw' });
  let answering = true;
  // Headers iterate lower-cased; the names configured may be in any case.
  const extraHeaders = new Set(Object.keys(hook.headers).map((name) => name.toLowerCase()));

  /** The request for an event, or a PermanentFailure when it can never be built. */
  const request = ({ body, contentType }: TransformedBody, event: CloudEvent, traceparent: string | undefined): { body: string; headers: Headers } => {
    const now = new Date(clock.now());
    const timestamp = String(Math.floor(now.getTime() / 1000));
    let headers: Headers;
    try {
      // Extra headers first, so they cannot replace the ones receivers verify.
      headers = new Headers(hook.headers);
      headers.set('content-type', contentType);
      headers.set('user-agent', 'boxrelay');
      headers.set('webhook-id', receiverId(event));
      headers.set('webhook-timestamp', timestamp);
      // The receiver continues the trace of the attempt (tracing on).
      if (traceparent) headers.set('traceparent', traceparent);
    } catch {
      // A value that cannot be encoded (an event id outside Latin-1, a bad configured value) fails
      // every attempt; the error would quote the value, so it is not kept.
      throw new HookRequestInvalidError();
    }
    // `v1,<base64>` over `<webhook-id>.<webhook-timestamp>.<body>`, the library signing with the same second.
    if (signer) headers.set('webhook-signature', signer.sign(receiverId(event), now, body));
    return { body, headers };
  };

  const gated = withRateGate({
    name: hook.name,
    concurrency: hook.concurrency,
    maxAttempts: hook.maxAttempts,
    attemptTimeoutMs: hook.timeoutMs,
    ordering: hook.ordering,
    pauseAfterMs: hook.pauseAfter,
    spanName: () => 'POST',
    async deliver(event, signal, trace) {
      const built = request(bodyOf(event)!, event, trace?.traceparent);
      const sent = requestRecord(hook.url, built.headers, extraHeaders);
      const failed = <F extends SinkFailure>(failure: F, status: number | null = null, response: Exchange['response'] = null): F => {
        failure.exchange = { request: sent, status, response };
        return failure;
      };
      // After the transform, the signing and any wait of the rate gate: the last word before the request.
      trace?.starting?.();
      const timeout = AbortSignal.timeout(hook.timeoutMs);
      let response: Response;
      try {
        response = await fetchFn(hook.url, {
          method: 'POST',
          ...built,
          redirect: 'manual',
          signal: AbortSignal.any([signal, timeout]),
        });
      } catch (error) {
        answering = false;
        if (timeout.aborted) throw failed(new HookTimeoutError(hook.timeoutMs, { cause: error }));
        if (signal.aborted) throw new SinkStoppingError({ cause: error });
        // Only the system error code: fetch's own messages may quote the request's headers.
        const code = (error as { cause?: { code?: unknown } }).cause?.code;
        throw failed(new HookConnectionError(typeof code === 'string' ? code : undefined));
      }
      // The status decides; the body's first bytes are kept for the operator, the rest never read
      // (the attempt's timeout still bounds a body that drips).
      const answer = { headers: Object.fromEntries(response.headers), ...(await readCappedBody(response.body)) };
      answering = response.status < 500;
      if (response.ok) return { request: sent, status: response.status, response: answer };
      if (!retryableStatus(response.status)) throw failed(new HookRejectedError(response.status), response.status, answer);
      throw failed(new HookUnavailableError(response.status, parseRetryAfter(response.headers.get('retry-after'), clock.now())), response.status, answer);
    },
    up: () => answering,
    close: () => (closed ??= dispatcher?.close() ?? Promise.resolve()),
  }, hook.maxPerSecond);
  return {
    ...gated,
    // Before the rate gate: an event the transform skips or fails on makes no request, so takes no turn.
    async deliver(event, signal, trace) {
      if (bodyOf(event) === null) return 'skipped';
      return gated.deliver(event, signal, trace);
    },
  };
}
