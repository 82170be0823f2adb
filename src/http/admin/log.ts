import { methodNotAllowed } from '../send-error.js';
import type { AdminRoutes } from './router.js';

/**
 * `GET /admin/log` (an addition to the contract): `{"ok":true,"log":{"heldBackSeconds"}}`, how long
 * the oldest stored delivery has waited for its place in the log; while above a few seconds, no
 * sink can be sent it (docs/operations.md).
 */
export function logRoutes({ heldBackSeconds }: { heldBackSeconds(): Promise<number> }): AdminRoutes {
  return {
    mount(router) {
      router.get('/log', async (_req, res) => {
        res.json({ ok: true, log: { heldBackSeconds: await heldBackSeconds() } });
      });
      router.all('/log', methodNotAllowed('GET'));
    },
  };
}
