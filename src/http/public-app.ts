import type { RequestListener } from 'node:http';
import express from 'express';
import { InternalError } from '../errors.js';
import { untrusted, type Logger } from '../log.js';
import type { ReadinessReport } from './readiness.js';
import { mountHealth } from './health.js';
import { assignRequestId, newRequestId } from './request-id.js';
import { errorHandler, methodNotAllowed, notFound, sendRelayError } from './send-error.js';
import { receiveWebhook, type ReceiveWebhook, type ReceiveWebhookDeps } from './receive-webhook.js';

export interface PublicAppDeps extends ReceiveWebhookDeps {
  readiness(): Promise<ReadinessReport>;
  logger: Logger;
}

/**
 * The internet-facing app: only the receiver and bare health answers. `POST /webhooks` goes straight
 * to the receiver, which answers with plain node:http calls, so the hot path pays for no framework
 * (Express's dispatch cost more than verifying the signature); everything else goes to Express.
 */
export function createPublicApp(deps: PublicAppDeps): RequestListener {
  const receive = receiveWebhook(deps);
  const receiveRequest: RequestListener = (req, res) => {
    const requestId = newRequestId();
    res.setHeader('X-Request-Id', requestId);
    answer(receive, deps.logger, req, res, requestId);
  };
  const app = express();
  app.disable('x-powered-by');
  app.disable('etag');
  app.set('query parser', false);
  // Paths match exactly (contract section 2): case and a trailing slash count.
  app.set('case sensitive routing', true);
  app.set('strict routing', true);

  // Express routes an absolute-form target (`POST http://evil.example/webhooks`) by its path alone;
  // only origin-form targets may reach a route.
  app.use((req, res, next) => (req.url.startsWith('/') ? next() : assignRequestId(req, res, () => notFound(req, res, next))));
  // Rarer spellings Express also routes here (see isReceiverUrl) take this way.
  app.post('/webhooks', receiveRequest);
  app.use(assignRequestId);
  app.all('/webhooks', methodNotAllowed('POST'));
  mountHealth(app, deps.readiness, false);

  app.use(notFound);
  app.use(errorHandler(deps.logger));
  return (req, res) => (req.method === 'POST' && isReceiverUrl(req.url as string) ? receiveRequest(req, res) : app(req, res));
}

/**
 * The exact path `/webhooks` (contract section 2: case and a trailing slash count), with or without
 * a query, as Express matches it; whatever else Express would route to the receiver still gets there
 * through Express.
 */
function isReceiverUrl(url: string): boolean {
  return url.startsWith(RECEIVER_PATH) && (url.length === RECEIVER_PATH.length || url[RECEIVER_PATH.length] === '?');
}

const RECEIVER_PATH = '/webhooks';

/** The handler answers every error itself; this is for a bug past that (as Express's final handler). */
function answer(receive: ReceiveWebhook, logger: Logger, ...[req, res, requestId]: Parameters<ReceiveWebhook>): void {
  receive(req, res, requestId).catch((error: unknown) => {
    logger.error({ err: error, requestId, path: untrusted(req.url) }, 'unhandled error');
    if (res.headersSent) req.socket.destroy();
    else sendRelayError(res, new InternalError({ cause: error }), requestId);
  });
}

