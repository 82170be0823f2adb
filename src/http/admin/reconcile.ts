import type { Kysely } from 'kysely';
import { z } from 'zod';
import type { AuditTrail } from '../../audit-trail.js';
import { DEFAULT_ACCOUNT } from '../../config/default-account.js';
import { InvalidRequestError, NotFoundError, ReconcileNotConfiguredError } from '../../errors.js';
import type { Reconciler } from '../../reconcile/reconciler.js';
import { methodNotAllowed } from '../send-error.js';
import { startAudited } from '../../reconcile/start-audited.js';
import type { Schema } from '../../store/schema.js';
import { lastFinishedRun } from '../../store/state/reconcile-runs.js';
import { requester } from './requester.js';
import { isoTime, okAnswer, reply, type AdminOperation } from './operation.js';
import type { AdminRoutes } from './router.js';

const reconcileBody = z
  .strictObject({
    dryRun: z.boolean().optional().describe('List what a run would do, and do nothing.'),
    account: z.string().optional().describe('The account to reconcile (contract section 21); default `default`.'),
  })
  .optional();

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
  summary: "Starts a reconciliation run of an account (`default` unless named) now (audited); 409 while one of that account's runs on any replica.",
  body: { schema: reconcileBody.unwrap(), required: false },
  answers: { 202: okAnswer({ run: runReport }) },
  errors: ['invalid_request', 'not_found', 'payload_too_large', 'reconcile_in_progress', 'reconcile_not_configured', 'storage_unavailable'],
} as const satisfies AdminOperation;

export const reconcileStatusOperation = {
  method: 'get',
  path: '/reconcile',
  summary: "Whether the `default` account's run goes on, and its last finished one; the same for each account with API credentials under `accounts`.",
  answers: {
    200: okAnswer({
      ...reconcileState.shape,
      accounts: z.record(z.string(), reconcileState).describe('By account name, each account with API credentials (contract section 21), `default` included when it has them.'),
    }),
  },
  errors: ['reconcile_not_configured'],
} as const satisfies AdminOperation;

export interface ReconcileAudit {
  kysely: Kysely<Schema>;
  trail: AuditTrail;
  /** Whether the name is an account of the relay (contract section 21). */
  isAccount(name: string): boolean;
}

/**
 * `POST /admin/reconcile` starts a run of an account (202 with the run; 409 while one of its runs
 * goes on anywhere); `GET /admin/reconcile` reports whether one runs and the last finished one
 * (contract section 9), `default`'s at the top and each account's under `accounts` (section 21).
 */
export function reconcileRoutes(reconcilers: ReadonlyMap<string, Reconciler>, { kysely, trail, isAccount }: ReconcileAudit): AdminRoutes {
  const configured = (account: string): Reconciler => {
    if (!isAccount(account)) throw new NotFoundError('no account of this relay has that name');
    const reconciler = reconcilers.get(account);
    if (!reconciler) throw new ReconcileNotConfiguredError(account);
    return reconciler;
  };
  return {
    operations: [startReconcileOperation, reconcileStatusOperation],
    mount(router) {
      router.post(startReconcileOperation.path, async (req, res) => {
        const body = reconcileBody.safeParse(req.body);
        if (!body.success) throw new InvalidRequestError('expected no body or a JSON body {"dryRun"?: boolean, "account"?: string}');
        const { run } = await startAudited(
          { reconciler: configured(body.data?.account ?? DEFAULT_ACCOUNT), kysely, trail },
          { dryRun: body.data?.dryRun ?? false, by: requester(req), detail: { ...body.data } },
        );
        reply(res, startReconcileOperation, 202, { ok: true, run });
      });
      router.get(reconcileStatusOperation.path, async (_req, res) => {
        if (reconcilers.size === 0) throw new ReconcileNotConfiguredError(DEFAULT_ACCOUNT);
        const accounts = Object.fromEntries(await Promise.all([...reconcilers].map(async ([name, reconciler]) => [name, await reconciler.status()] as const)));
        // `default` without credentials: its runs of an earlier configuration, none going on.
        const own = accounts[DEFAULT_ACCOUNT] ?? { running: false, last: await lastFinishedRun(kysely, DEFAULT_ACCOUNT) };
        reply(res, reconcileStatusOperation, 200, { ok: true, ...own, accounts });
      });
      router.all('/reconcile', methodNotAllowed('GET', 'POST'));
    },
  };
}
