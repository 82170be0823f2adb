import type { Kysely } from 'kysely';
import { InvalidRequestError, NotFoundError } from '../../errors.js';
import { forgetBox, getBox, listBoxes } from '../../store/boxes.js';
import type { Schema } from '../../store/schema.js';
import { methodNotAllowed } from '../send-error.js';
import { pageOf, queryText, readPage } from './pagination.js';
import type { AdminRoutes } from './router.js';

const unknownBox = () => new NotFoundError('no such box');

/** `/admin/boxes?state=&q=`: the last known state of each box (contract section 7), and forgetting one. */
export function boxRoutes(kysely: Kysely<Schema>): AdminRoutes {
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
        if (!(await forgetBox(kysely, req.params.boxId as string))) throw unknownBox();
        res.status(204).end();
      });
      router.all('/boxes', methodNotAllowed('GET'));
      router.all('/boxes/:boxId', methodNotAllowed('GET', 'DELETE'));
    },
  };
}
