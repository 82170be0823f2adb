import express, { type Router } from 'express';
import { requireBearer } from './auth.js';

export interface AdminRoutes {
  /** Each capability mounts its own routes on the authenticated router. */
  mount(router: Router): void;
}

/** `/admin/*`: JSON only, every route behind the bearer token. */
export function createAdminRouter(token: string, routes: AdminRoutes[]): Router {
  const router = express.Router();
  router.use(requireBearer(token));
  router.use(express.json({ limit: '16kb' }));
  for (const r of routes) r.mount(router);
  return router;
}
