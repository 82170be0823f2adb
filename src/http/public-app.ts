import express, { type Express } from 'express';
import type { Logger } from '../log.js';
import type { ReadinessReport } from './readiness.js';
import { assignRequestId } from './request-id.js';
import { errorHandler, methodNotAllowed, notFound } from './send-error.js';
import { receiveWebhook, type ReceiveWebhookDeps } from './receive-webhook.js';

export interface PublicAppDeps extends ReceiveWebhookDeps {
  readiness(): Promise<ReadinessReport>;
  logger: Logger;
}

/** The internet-facing listener: only the receiver and bare health answers. */
export function createPublicApp(deps: PublicAppDeps): Express {
  const app = express();
  app.disable('x-powered-by');
  app.disable('etag');
  app.set('query parser', false);
  app.use(assignRequestId);

  app.post('/webhooks', receiveWebhook(deps));
  app.all('/webhooks', methodNotAllowed);
  mountHealth(app, deps.readiness, false);

  app.use(notFound);
  app.use(errorHandler(deps.logger));
  return app;
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
