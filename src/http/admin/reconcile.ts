import type { Kysely } from 'kysely';
import { z } from 'zod';
import type { AuditTrail } from '../../audit-trail.js';
import { InvalidRequestError, ReconcileNotConfiguredError } from '../../errors.js';
import type { Reconciler } from '../../reconcile/reconciler.js';
import { methodNotAllowed } from '../send-error.js';
import { startAudited } from '../../reconcile/start-audited.js';
import type { Schema } from '../../store/schema.js';
import { requester } from './requester.js';
import { isoTime, okAnswer, reply, type AdminOperation } from './operation.js';
import type { AdminRoutes } from './router.js';

const reconcileBody = z.strictObject({ dryRun: z.boolean().optional().describe('List what a run would do, and do nothing.') }).optional();

/** A run's report (contract section 9). */
const runReport = z.strictObject({
  id: z.string(),
  startedAt: isoTime(),
  finishedAt: isoTime().nullable(),
  outcome: z.enum(['succeeded', 'failed', 'dry-run']).nullable().describe('Null while the run goes on.'),
  boxesListed: z.number().int(),
  boxesRepaired: z.number().int(),
  eventsFromHistory: z.number().int(),
  eventsSynthesized: z.number().int(),
  boxesForgotten: z.number().int(),
  historyRecordsSkipped: z.number().int(),
  error: z.string().nullable(),
  actions: z
    .array(
      z.strictObject({
        boxId: z.string(),
        action: z.enum(['relay-history', 'synthesize', 'record-state', 'forget']),
        eventId: z.string().optional(),
        type: z.string().optional(),
        state: z.string().optional(),
      }),
    )
    .optional()
    .describe('Dry runs only: what a real run would do.'),
});

/** Whether an account's run goes on, and its last finished one. */
export const reconcileState = z.strictObject({ running: z.boolean(), last: runReport.nullable() });

export const startReconcileOperation = {
  method: 'post',
  path: '/reconcile',
  summary: 'Starts a reconciliation run now (audited); 409 while one runs on any replica.',
  body: { schema: reconcileBody.unwrap(), required: false },
  answers: { 202: okAnswer({ run: runReport }) },
  errors: ['invalid_request', 'payload_too_large', 'reconcile_in_progress', 'reconcile_not_configured', 'storage_unavailable'],
} as const satisfies AdminOperation;

export const reconcileStatusOperation = {
  method: 'get',
  path: '/reconcile',
  summary: 'Whether a run goes on, and the last finished one.',
  answers: { 200: okAnswer(reconcileState.shape) },
  errors: ['reconcile_not_configured'],
} as const satisfies AdminOperation;

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
    operations: [startReconcileOperation, reconcileStatusOperation],
    mount(router) {
      router.post(startReconcileOperation.path, async (req, res) => {
        const body = reconcileBody.safeParse(req.body);
        if (!body.success) throw new InvalidRequestError('expected no body or a JSON body {"dryRun"?: boolean}');
        const { run } = await startAudited(
          { reconciler: configured(), ...audit },
          { dryRun: body.data?.dryRun ?? false, by: requester(req), detail: { ...body.data } },
        );
        reply(res, startReconcileOperation, 202, { ok: true, run });
      });
      router.get(reconcileStatusOperation.path, async (_req, res) => {
        reply(res, reconcileStatusOperation, 200, { ok: true, ...(await configured().status()) });
      });
      router.all('/reconcile', methodNotAllowed('GET', 'POST'));
    },
  };
}
