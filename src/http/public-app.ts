import type { RequestListener } from 'node:http';
import express, { type Express } from 'express';
import { InternalError } from '../errors.js';
import type { Logger } from '../log.js';
import type { ReadinessReport } from './readiness.js';
import { assignRequestId, newRequestId } from './request-id.js';
import { errorHandler, methodNotAllowed, notFound, sendRelayError } from './send-error.js';
import { receiveWebhook, type ReceiveWebhook, type ReceiveWebhookDeps } from './receive-webhook.js';

export interface PublicAppDeps extends ReceiveWebhookDeps {
  readiness(): Promise<ReadinessReport>;
  logger: Logger;
}

/** The path upstream deliveries use, with or without a query; other spellings go through Express. */
const CANONICAL_WEBHOOKS = /^\/webhooks(?:\?|$)/;

/**
 * The internet-facing listener: only the receiver and bare health answers. `POST /webhooks` at its
 * canonical path skips Express (whose routing, prototypes and response helpers cost more than the
 * receiver's own work); Express serves everything else, including the receiver at the path's other
 * spellings it matches (`/Webhooks`, `/webhooks/`), so every URL is answered exactly as before.
 */
export function createPublicApp(deps: PublicAppDeps): RequestListener {
  const receive = receiveWebhook(deps);
  const app = express();
  app.disable('x-powered-by');
  app.disable('etag');
  app.set('query parser', false);
  app.use(assignRequestId);

  app.post('/webhooks', (req, res) => answer(receive, deps.logger, req, res, res.locals.requestId as string));
  app.all('/webhooks', methodNotAllowed);
  mountHealth(app, deps.readiness, false);

  app.use(notFound);
  app.use(errorHandler(deps.logger));

  return (req, res) => {
    if (req.method !== 'POST' || !CANONICAL_WEBHOOKS.test(req.url ?? '')) return void app(req, res);
    const requestId = newRequestId();
    res.setHeader('X-Request-Id', requestId);
    answer(receive, deps.logger, req, res, requestId);
  };
}

/** The handler answers every error itself; this is for a bug past that (as Express's final handler). */
function answer(receive: ReceiveWebhook, logger: Logger, ...[req, res, requestId]: Parameters<ReceiveWebhook>): void {
  receive(req, res, requestId).catch((error: unknown) => {
    logger.error({ err: error, requestId, path: req.url }, 'unhandled error');
    if (res.headersSent) req.socket.destroy();
    else sendRelayError(res, new InternalError({ cause: error }), requestId);
  });
}

/** `/healthz` and `/readyz`; only the internal listener names the dependencies. */
export function mountHealth(app: Express, readiness: () => Promise<ReadinessReport>, detailed: boolean): void {
  app.get('/healthz', (_req, res) => void res.json({ ok: true }));
  app.get('/readyz', async (_req, res) => {
    const report = await readiness();
    res.status(report.ok ? 200 : 503).json(detailed ? report : { ok: report.ok });
  });
  app.all(['/healthz', '/readyz'], methodNotAllowed);
}
