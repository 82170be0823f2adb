import type { Kysely } from 'kysely';
import { InvalidRequestError } from '../../errors.js';
import { AUDIT_ACTIONS, listAudit, type AuditAction } from '../../store/state/audit.js';
import type { Schema } from '../../store/schema.js';
import { methodNotAllowed } from '../send-error.js';
import { pageOf, queryText, readPage } from './pagination.js';
import type { AdminRoutes } from './router.js';

/**
 * `GET /admin/audit?action=&limit=&cursor=`: operator changes, newest first (contract section 15).
 * Our additions: `target=` (a dead-letter id, sink or box id) and `eventId=` (retries and discards
 * of that event's dead letters), which the console's box and event views link to.
 */
export function auditRoutes(kysely: Kysely<Schema>): AdminRoutes {
  return {
    mount(router) {
      router.get('/audit', async (req, res) => {
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
        res.json({ ok: true, audit: items, nextCursor });
      });
      router.all('/audit', methodNotAllowed('GET'));
    },
  };
}
