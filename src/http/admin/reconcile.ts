import type { Kysely } from 'kysely';
import { z } from 'zod';
import type { AuditTrail } from '../../audit-trail.js';
import { InvalidRequestError, ReconcileNotConfiguredError } from '../../errors.js';
import type { Reconciler } from '../../reconcile/reconciler.js';
import { methodNotAllowed } from '../send-error.js';
import { startAudited } from '../../reconcile/start-audited.js';
import type { Schema } from '../../store/schema.js';
import { requester } from './requester.js';
import type { AdminRoutes } from './router.js';

const reconcileBody = z.strictObject({ dryRun: z.boolean().optional() }).optional();

/**
 * `POST /admin/reconcile` starts a run (202 with the run; 409 while one runs anywhere);
 * `GET /admin/reconcile` reports whether one runs and the last finished one (contract section 9).
 */
export function reconcileRoutes(reconciler: Reconciler | undefined, audit: { kysely: Kysely<Schema>; trail: AuditTrail }): AdminRoutes {
  const configured = (): Reconciler => {
    if (!reconciler) throw new ReconcileNotConfiguredError();
    return reconciler;
  };
  return {
    mount(router) {
      router.post('/reconcile', async (req, res) => {
        const body = reconcileBody.safeParse(req.body);
        if (!body.success) throw new InvalidRequestError('expected no body or a JSON body {"dryRun"?: boolean}');
        const { run } = await startAudited(
          { reconciler: configured(), ...audit },
          { dryRun: body.data?.dryRun ?? false, by: requester(req), detail: { ...body.data } },
        );
        res.status(202).json({ ok: true, run });
      });
      router.get('/reconcile', async (_req, res) => {
        res.json({ ok: true, ...(await configured().status()) });
      });
      router.all('/reconcile', methodNotAllowed('GET', 'POST'));
    },
  };
}
