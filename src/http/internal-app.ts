import express, { type Express, type Router } from 'express';
import type { Registry } from 'prom-client';
import type { Logger } from '../log.js';
import { mountHealth } from './health.js';
import type { ReadinessReport } from './readiness.js';
import { assignRequestId } from './request-id.js';
import { errorHandler, notFound } from './send-error.js';

export interface InternalAppDeps {
  registry: Registry;
  readiness(): Promise<ReadinessReport>;
  /** `/admin/*`, present only when an admin token is configured (404 otherwise). */
  admin?: Router | undefined;
  /** `/console`: the operator console, present with the admin API. */
  console?: Router | undefined;
  logger: Logger;
}

/** The cluster-internal listener: metrics, detailed health and the admin API. */
export function createInternalApp(deps: InternalAppDeps): Express {
  const app = express();
  app.disable('x-powered-by');
  app.use(assignRequestId);

  app.get('/metrics', async (_req, res) => {
    res.set('Content-Type', deps.registry.contentType).send(await deps.registry.metrics());
  });
  mountHealth(app, deps.readiness, true);
  if (deps.admin) app.use('/admin', deps.admin);
  if (deps.console) app.use('/console', deps.console);

  app.use(notFound);
  app.use(errorHandler(deps.logger));
  return app;
}
