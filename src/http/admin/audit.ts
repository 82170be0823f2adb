import type { Kysely } from 'kysely';
import { InvalidRequestError } from '../../errors.js';
import { AUDIT_ACTIONS, listAudit, type AuditAction } from '../../store/state/audit.js';
import type { Schema } from '../../store/schema.js';
import { methodNotAllowed } from '../send-error.js';
import { z } from 'zod';
import { isoTime, pageAnswer, queryParam, reply, type AdminOperation } from './operation.js';
import { PAGE_QUERY, pageOf, queryText, readPage } from './pagination.js';
import type { AdminRoutes } from './router.js';

const ACTIONS = AUDIT_ACTIONS as readonly AuditAction[] as [AuditAction, ...AuditAction[]];

export const auditOperation = {
  method: 'get',
  path: '/audit',
  summary: 'Operator changes, newest first.',
  query: {
    action: queryParam('Only changes of this action.', ACTIONS),
    target: queryParam('Only changes of this target: a dead-letter id, a sink or a box id.'),
    eventId: queryParam("Only retries and discards of this event's dead letters."),
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
 * of that event's dead letters), which the console's box and event views link to.
 */
export function auditRoutes(kysely: Kysely<Schema>): AdminRoutes {
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
          eventId: queryText(req, 'eventId'),
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
