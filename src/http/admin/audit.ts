import type { Request } from 'express';
import type { Kysely } from 'kysely';
import { DEFAULT_ACCOUNT } from '../../config/default-account.js';
import { InvalidRequestError } from '../../errors.js';
import { AUDIT_ACTIONS, listAudit, type AuditAction } from '../../store/state/audit.js';
import { accountKey } from '../../store/account-keys.js';
import type { Schema } from '../../store/schema.js';
import { methodNotAllowed } from '../send-error.js';
import { z } from 'zod';
import { ACCOUNT_OF_ID, accountParam, type AdminAccounts } from './account-query.js';
import { isoTime, pageAnswer, queryParam, reply, type AdminOperation } from './operation.js';
import { PAGE_QUERY, pageOf, queryText, readPage } from './pagination.js';
import type { AdminRoutes } from './router.js';

const ACTIONS = AUDIT_ACTIONS as readonly AuditAction[] as [AuditAction, ...AuditAction[]];

/** `eventId=` of `account=` (default `default`) as the audit trail stores it. */
function eventKeyOf(req: Request, accounts: AdminAccounts): string | undefined {
  const account = accountParam(req, accounts) ?? DEFAULT_ACCOUNT;
  const eventId = queryText(req, 'eventId');
  return eventId === undefined ? undefined : accountKey(account, eventId);
}

export const auditOperation = {
  method: 'get',
  path: '/audit',
  summary: 'Operator changes, newest first.',
  query: {
    action: queryParam('Only changes of this action.', ACTIONS),
    target: queryParam('Only changes of this target: a dead-letter id, a sink, a box id or an event id (of an account other than `default`: `<account>:<id>`).'),
    eventId: queryParam("Only retries and discards of this event's dead letters."),
    // The account `eventId` is of.
    ...ACCOUNT_OF_ID,
    ...PAGE_QUERY,
  },
  answers: {
    200: pageAnswer(
      'audit',
      z.strictObject({
        id: z.number().int(),
        at: isoTime(),
        action: z.enum(ACTIONS),
        target: z.string().nullable(),
        by: z.string().describe("The admin client's address, or `cli`."),
        detail: z.record(z.string(), z.unknown()).describe("The request's parameters."),
      }),
    ),
  },
  errors: ['invalid_request'],
} as const satisfies AdminOperation;

/**
 * `GET /admin/audit?action=&limit=&cursor=`: operator changes, newest first (contract section 15).
 * Our additions: `target=` (a dead-letter id, sink or box id) and `eventId=` (retries and discards
 * of that event's dead letters, with `account=`), which the console's box and event views link to.
 */
export function auditRoutes(kysely: Kysely<Schema>, accounts: AdminAccounts): AdminRoutes {
  return {
    operations: [auditOperation],
    mount(router) {
      router.get(auditOperation.path, async (req, res) => {
        const page = readPage(req);
        if (page.after !== undefined && typeof page.after !== 'number') throw new InvalidRequestError('cursor is not one this server issued');
        const action = queryText(req, 'action');
        if (action !== undefined && !AUDIT_ACTIONS.includes(action as AuditAction)) {
          throw new InvalidRequestError(`action must be one of ${AUDIT_ACTIONS.join(', ')}`);
        }
        const rows = await listAudit(kysely, {
          action: action as AuditAction | undefined,
          target: queryText(req, 'target'),
          eventId: eventKeyOf(req, accounts),
          beforeId: page.after,
          limit: page.limit + 1,
        });
        const { items, nextCursor } = pageOf(rows, page, (entry) => entry.id);
        reply(res, auditOperation, 200, { ok: true, audit: items, nextCursor });
      });
      router.all('/audit', methodNotAllowed('GET'));
    },
  };
}
