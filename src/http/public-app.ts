import express, { type Express } from 'express';
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
 * The internet-facing Express app: only the receiver and bare health answers. The receiver is its
 * first route and answers with plain node:http calls, so the hot path pays for Express's dispatch
 * and nothing more (no per-request middleware, no response helpers).
 */
export function createPublicApp(deps: PublicAppDeps): Express {
  const receive = receiveWebhook(deps);
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
  app.post('/webhooks', (req, res) => {
    const requestId = newRequestId();
    res.setHeader('X-Request-Id', requestId);
    answer(receive, deps.logger, req, res, requestId);
  });
  app.use(assignRequestId);
  app.all('/webhooks', methodNotAllowed('POST'));
  mountHealth(app, deps.readiness, false);

  app.use(notFound);
  app.use(errorHandler(deps.logger));
  return app;
}

/** The handler answers every error itself; this is for a bug past that (as Express's final handler). */
function answer(receive: ReceiveWebhook, logger: Logger, ...[req, res, requestId]: Parameters<ReceiveWebhook>): void {
  receive(req, res, requestId).catch((error: unknown) => {
    logger.error({ err: error, requestId, path: untrusted(req.url) }, 'unhandled error');
    if (res.headersSent) req.socket.destroy();
    else sendRelayError(res, new InternalError({ cause: error }), requestId);
  });
}

