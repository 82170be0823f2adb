import type { AuditTrail } from '../../audit-trail.js';
import { InvalidRequestError, NotFoundError } from '../../errors.js';
import { forgetBoxAudited, getBox, listBoxes } from '../../store/state/boxes.js';
import type { Database } from '../../store/engines/database.js';
import { methodNotAllowed } from '../send-error.js';
import { pageOf, queryText, readPage } from './pagination.js';
import { requester } from './requester.js';
import type { AdminRoutes } from './router.js';

const unknownBox = () => new NotFoundError('no such box');

/** `/admin/boxes?state=&q=`: the last known state of each box (contract section 7), and forgetting one. */
export function boxRoutes(database: Database, trail: AuditTrail): AdminRoutes {
  const { kysely } = database;
  return {
    mount(router) {
      router.get('/boxes', async (req, res) => {
        const page = readPage(req);
        if (page.after !== undefined && typeof page.after !== 'string') {
          throw new InvalidRequestError('cursor is not one this server issued');
        }
        const rows = await listBoxes(kysely, { state: queryText(req, 'state'), search: queryText(req, 'q'), afterId: page.after, limit: page.limit + 1 });
        const { items, nextCursor } = pageOf(rows, page, (box) => box.id);
        res.json({ ok: true, boxes: items, nextCursor });
      });
      router.get('/boxes/:boxId', async (req, res) => {
        const box = await getBox(kysely, req.params.boxId as string);
        if (!box) throw unknownBox();
        res.json({ ok: true, box });
      });
      router.delete('/boxes/:boxId', async (req, res) => {
        const id = req.params.boxId as string;
        await trail.record({ action: 'forget', target: id, by: requester(req), detail: { boxId: id } }, async (audit) => {
          if (!(await forgetBoxAudited(database, id, audit))) throw unknownBox();
        });
        res.status(204).end();
      });
      router.all('/boxes', methodNotAllowed('GET'));
      router.all('/boxes/:boxId', methodNotAllowed('GET', 'DELETE'));
    },
  };
}
