import { methodNotAllowed } from '../send-error.js';
import { z } from 'zod';
import { okAnswer, reply, type AdminOperation } from './operation.js';
import type { AdminRoutes } from './router.js';

export const logOperation = {
  method: 'get',
  path: '/log',
  summary: 'How long the oldest stored delivery has waited for its place in the log.',
  answers: { 200: okAnswer({ log: z.strictObject({ heldBackSeconds: z.number() }) }) },
  errors: [],
} as const satisfies AdminOperation;

/**
 * `GET /admin/log` (an addition to the contract): `{"ok":true,"log":{"heldBackSeconds"}}`, how long
 * the oldest stored delivery has waited for its place in the log; while above a few seconds, no
 * sink can be sent it (docs/operations.md).
 */
export function logRoutes({ heldBackSeconds }: { heldBackSeconds(): Promise<number> }): AdminRoutes {
  return {
    operations: [logOperation],
    mount(router) {
      router.get(logOperation.path, async (_req, res) => {
        reply(res, logOperation, 200, { ok: true, log: { heldBackSeconds: await heldBackSeconds() } });
      });
      router.all('/log', methodNotAllowed('GET'));
    },
  };
}
