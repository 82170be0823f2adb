import express, { type RequestHandler, type Router } from 'express';
import { InvalidRequestError } from '../../errors.js';
import { packageVersion } from '../../package-version.js';
import { requireBearer } from './auth.js';
import { openApiRoutes } from './openapi.js';
import type { AdminOperation } from './operation.js';

export interface AdminRoutes {
  /** What `GET /admin/openapi.json` says of each route mounted (every one, test/admin-openapi.test.ts checks). */
  operations: readonly AdminOperation[];
  /** Each capability mounts its own routes on the authenticated router. */
  mount(router: Router): void;
}

/** `/admin/*`: JSON only, every route behind the bearer token; `/admin/openapi.json` describes them all. */
export function createAdminRouter(token: string, routes: AdminRoutes[]): Router {
  const router = express.Router();
  router.use(requireBearer(token));
  router.use(express.json({ limit: '16kb' }));
  router.use(itemByQuery);
  for (const r of [...routes, openApiRoutes(routes, packageVersion())]) r.mount(router);
  return router;
}

const ITEM_BY_QUERY = /^\/(boxes|events)\/(?:\?|$)/;

/**
 * `/admin/boxes/?id=<id>` and `/admin/events/?id=<id>` (an empty last segment, which no id is, and
 * the id in the query) are `/admin/boxes/<id>` and `/admin/events/<id>`: a browser cannot send an id
 * `.` or `..` as a path segment, not even as `%2E%2E`, which URL parsers also resolve as a dot segment.
 */
const itemByQuery: RequestHandler = (req, _res, next) => {
  const collection = ITEM_BY_QUERY.exec(req.url)?.[1];
  if (collection === undefined || req.query.id === undefined) return next();
  const id = req.query.id;
  if (typeof id !== 'string' || id === '') throw new InvalidRequestError('id: give one non-empty id');
  // The other parameters (`account=`) stay.
  const rest = new URLSearchParams(req.url.slice(req.url.indexOf('?')));
  rest.delete('id');
  req.url = `/${collection}/${encodeURIComponent(id)}${rest.size === 0 ? '' : `?${rest.toString()}`}`;
  next();
};
