import type { Request } from 'express';
import { z } from 'zod';
import type { Operations } from '../../dispatch/operations.js';
import { InvalidRequestError } from '../../errors.js';
import type { DeadLetter } from '../../store/exceptions/rows.js';
import { methodNotAllowed } from '../send-error.js';
import { pageOf, queryText, readPage } from './pagination.js';
import { requester } from './requester.js';
import type { AdminRoutes } from './router.js';

/** An id from the path; anything that is not one becomes NaN, which operations refuse (400). */
const idOf = (req: Request): number => (/^\d{1,15}$/.test(String(req.params.id)) ? Number(req.params.id) : Number.NaN);

const retryAllBody = z.strictObject({ sink: z.string().optional() });

const view = (d: DeadLetter) => ({ ...d, failedAt: new Date(d.failedAt).toISOString() });

/**
 * `GET /admin/dead-letters`, `POST /admin/dead-letters/:id/retry`, `DELETE /admin/dead-letters/:id`,
 * and `POST /admin/dead-letters/retry {"sink"?: name}`: every dead letter (of one sink) at once.
 */
export function deadLetterRoutes(operations: Operations): AdminRoutes {
  return {
    mount(router) {
      router.get('/dead-letters', async (req, res) => {
        const page = readPage(req);
        if (page.after !== undefined && typeof page.after !== 'number') throw new InvalidRequestError('cursor is not one this server issued');
        const rows = await operations.list({ sink: queryText(req, 'sink'), after: page.after, limit: page.limit + 1 });
        const { items, nextCursor } = pageOf(rows, page, (d) => d.id);
        res.json({ ok: true, deadLetters: items.map(view), nextCursor });
      });
      // Registered before the `:id` routes, which would take `retry` for an id.
      router.post('/dead-letters/retry', async (req, res) => {
        const body = retryAllBody.safeParse(req.body ?? {});
        if (!body.success) throw new InvalidRequestError('expected a JSON body {"sink"?: name}');
        const retried = await operations.retryAll(body.data.sink, requester(req));
        res.status(202).json({ ok: true, retried });
      });
      router.post('/dead-letters/:id/retry', async (req, res) => {
        await operations.retry(idOf(req), requester(req));
        res.status(202).json({ ok: true });
      });
      router.delete('/dead-letters/:id', async (req, res) => {
        await operations.discard(idOf(req), requester(req));
        res.status(204).end();
      });
      router.all('/dead-letters', methodNotAllowed('GET'));
      router.all('/dead-letters/retry', methodNotAllowed('POST'));
      router.all('/dead-letters/:id', methodNotAllowed('DELETE'));
      router.all('/dead-letters/:id/retry', methodNotAllowed('POST'));
    },
  };
}
