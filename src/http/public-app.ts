import express, { type Express, type Request, type RequestHandler } from 'express';
import { DEFAULT_ACCOUNT } from '../config/default-account.js';
import { InternalError } from '../errors.js';
import { untrusted, type Logger } from '../log.js';
import { UNKNOWN_ACCOUNT_LABEL } from '../metrics/metrics.js';
import type { ReadinessReport } from './readiness.js';
import { mountHealth } from './health.js';
import { assignRequestId, newRequestId } from './request-id.js';
import { errorHandler, methodNotAllowed, notFound, sendRelayError } from './send-error.js';
import { receiveWebhook, type AccountEndpoint, type ReceiveWebhook, type ReceiveWebhookDeps } from './receive-webhook.js';

export interface PublicAppDeps extends ReceiveWebhookDeps {
  /** The account an endpoint serves (`default` for `/webhooks`); undefined: no such endpoint (404). */
  accountOf(name: string): AccountEndpoint | undefined;
  readiness(): Promise<ReadinessReport>;
  logger: Logger;
}

const ACCOUNT_ENDPOINT = '/webhooks/';

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
  // The account is found by its name before anything of the request is read (contract section 21):
  // an unknown name is a 404 without any HMAC work. The raw path, so no escape spells a name.
  const receiveAs = (name: (req: Request) => string): RequestHandler => (req, res, next) => {
    const asked = name(req);
    const account = deps.accountOf(asked);
    if (account === undefined) {
      // Counted under a bounded label, never the name from the path.
      deps.metrics.webhookRequests.inc({ account: asked === DEFAULT_ACCOUNT ? DEFAULT_ACCOUNT : UNKNOWN_ACCOUNT_LABEL, outcome: 'not_found' });
      return next();
    }
    const requestId = newRequestId();
    res.setHeader('X-Request-Id', requestId);
    answer(receive, deps.logger, req, res, requestId, account);
  };
  // `default` is served at `/webhooks` only: one endpoint per account.
  const namedIn = (req: Request) => {
    const name = req.path.slice(ACCOUNT_ENDPOINT.length);
    return name === DEFAULT_ACCOUNT ? '' : name;
  };
  app.post('/webhooks', receiveAs(() => DEFAULT_ACCOUNT));
  app.post('/webhooks/:account', receiveAs(namedIn));
  app.use(assignRequestId);
  const servedOnly = (name: (req: Request) => string): RequestHandler => (req, res, next) =>
    deps.accountOf(name(req)) === undefined ? next() : methodNotAllowed('POST')(req, res, next);
  app.all('/webhooks', servedOnly(() => DEFAULT_ACCOUNT));
  app.all('/webhooks/:account', servedOnly(namedIn));
  mountHealth(app, deps.readiness, false);

  app.use(notFound);
  app.use(errorHandler(deps.logger));
  return app;
}

/** The handler answers every error itself; this is for a bug past that (as Express's final handler). */
function answer(receive: ReceiveWebhook, logger: Logger, ...[req, res, requestId, account]: Parameters<ReceiveWebhook>): void {
  receive(req, res, requestId, account).catch((error: unknown) => {
    logger.error({ err: error, requestId, path: untrusted(req.url) }, 'unhandled error');
    if (res.headersSent) req.socket.destroy();
    else sendRelayError(res, new InternalError({ cause: error }), requestId);
  });
}

