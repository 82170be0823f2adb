import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Clock } from '../clock.js';
import { InternalError } from '../errors.js';
import { parseEvent, type ParsedEvent } from '../events/parse-event.js';
import { untrusted, type Logger } from '../log.js';
import type { Metrics, WebhookOutcome } from '../metrics/metrics.js';
import type { AcceptEvent } from '../store/write/accept-event.js';
import { checkTimestamp, readDeliveryHeaders } from '../verify/delivery-headers.js';
import type { SecretRing } from '../verify/secrets.js';
import type { Tracing } from '../tracing/tracing.js';
import { readBody } from './read-body.js';
import { asRelayError, sendJson, sendRelayError } from './send-error.js';

/** An account's endpoint (contract section 21): its name, and the secrets that verify there and nowhere else. */
export interface AccountEndpoint {
  name: string;
  secrets: SecretRing;
}

export interface ReceiveWebhookDeps {
  toleranceSeconds: number;
  maxBodyBytes: number;
  clock: Clock;
  accept: AcceptEvent;
  metrics: Metrics;
  tracing: Tracing;
  logger: Logger;
}

/** Answers one request; rejects only on a bug (anything that is not a RelayError). */
export type ReceiveWebhook = (req: IncomingMessage, res: ServerResponse, requestId: string, account: AccountEndpoint) => Promise<void>;

/**
 * The logger of the one line per delivery. The line's keys are fixed, none of them a redacted path,
 * so redaction could never apply to it: skipped, it halves the line's cost. Every other line keeps
 * the safety net.
 */
export function deliveryLogger(logger: Logger): Logger {
  return logger.child({}, { redact: { paths: [] } });
}

/**
 * `POST /webhooks` (and `/webhooks/<account>`): raw body -> verify with the account's secrets ->
 * parse -> store once, as the account's -> 200. The checks run in the order of
 * the contract's table, so the first failing row answers; no JSON parsing happens before the HMAC.
 * Plain node:http, so the hot path pays for no framework.
 */
export function receiveWebhook(deps: ReceiveWebhookDeps): ReceiveWebhook {
  const { clock, accept, metrics, logger, tracing } = deps;
  const deliveryLog = deliveryLogger(logger);

  return async (req, res, requestId, { name: account, secrets }) => {
    const started = performance.now();
    const span = tracing.receive(req.headers);
    let event: ParsedEvent | undefined;
    let deliveryId: string | undefined;
    let outcome: WebhookOutcome;
    try {
      const headers = readDeliveryHeaders(req.headersDistinct);
      deliveryId = headers.deliveryId;
      checkTimestamp(headers.timestamp, clock.now(), deps.toleranceSeconds);
      const body = await readBody(req, deps.maxBodyBytes);
      const slot = await secrets.verify(headers.deliveryId, headers.timestamp, headers.signature, body);
      metrics.signatureMatches.inc({ account, slot: String(slot) });
      event = parseEvent(body, headers.deliveryId);

      const receivedAt = clock.now();
      const stored = await accept({ event, account, receivedAt, attempt: headers.attempt, traceparent: span.traceparent });
      outcome = stored.duplicate ? 'duplicate' : 'accepted';
      if (stored.payloadDiffers) {
        logger.warn({ requestId, deliveryId: untrusted(deliveryId), type: untrusted(event.type) }, 'duplicate delivery with a different body; the first copy is kept');
      }
      if (!stored.duplicate) metrics.eventDelay.observe(Math.max(0, receivedAt - Date.parse(event.createdAt)) / 1000);
      sendJson(res, 200, { ok: true, id: event.id, duplicate: stored.duplicate });
    } catch (error) {
      const refusal = asRelayError(error);
      if (refusal instanceof InternalError) logger.error({ err: error, requestId, deliveryId: untrusted(deliveryId) }, 'delivery failed inside the relay');
      outcome = refusal.code as WebhookOutcome;
      // Answered before the body was read in full: closing spares reading the rest (up to 30 s).
      if (!req.complete) res.setHeader('Connection', 'close');
      sendRelayError(res, refusal, requestId);
    }
    metrics.webhookRequests.inc({ account, outcome });
    span.end({
      'http.response.status_code': res.statusCode,
      'boxrelay.outcome': outcome,
      ...(deliveryId === undefined ? {} : { 'boxrelay.delivery_id': untrusted(deliveryId, 256) as string }),
      ...(event ? { 'boxrelay.event_type': event.type, ...(event.boxId === null ? {} : { 'boxrelay.box_id': event.boxId }) } : {}),
    });
    const log = outcome === 'accepted' || outcome === 'duplicate' ? 'info' : 'warn';
    deliveryLog[log](
      {
        requestId,
        account,
        deliveryId: untrusted(deliveryId),
        type: untrusted(event?.type),
        boxId: untrusted(event?.boxId),
        outcome,
        durationMs: Math.round((performance.now() - started) * 100) / 100,
        ...span.logFields,
      },
      'delivery',
    );
  };
}
