import type { Kysely } from 'kysely';
import { z } from 'zod';
import type { Operations } from '../../dispatch/operations.js';
import { InvalidRequestError, NotFoundError } from '../../errors.js';
import { listAttempts, type AttemptPosition } from '../../store/attempts/list-attempts.js';
import { getEvent } from '../../store/state/events.js';
import type { Schema } from '../../store/schema.js';
import { methodNotAllowed } from '../send-error.js';
import { pageOf, queryText, readPage, type Page } from './pagination.js';
import { requester } from './requester.js';
import type { AdminRoutes } from './router.js';

// The cursor carries the last attempt returned as "at:id".
export const encodePosition = ({ at, id }: AttemptPosition): string => `${at}:${id}`;

export function decodePosition(after: Page['after']): AttemptPosition | undefined {
  if (after === undefined) return undefined;
  const match = typeof after === 'string' ? /^(\d{1,15}):(\d{1,15})$/.exec(after) : null;
  if (!match) throw new InvalidRequestError('cursor is not one this server issued');
  return { at: Number(match[1]), id: Number(match[2]) };
}

const resendBody = z.strictObject({ sink: z.string().min(1) });

/**
 * `GET /admin/events/:id/attempts?sink=&limit=&cursor=` (newest first) and `POST
 * /admin/events/:id/resend {"sink"}` (contract section 16).
 */
export function attemptRoutes({ kysely, operations }: { kysely: Kysely<Schema>; operations: Pick<Operations, 'resend'> }): AdminRoutes {
  return {
    mount(router) {
      router.get('/events/:id/attempts', async (req, res) => {
        const eventId = req.params.id as string;
        const page = readPage(req);
        const sink = queryText(req, 'sink');
        if (!(await getEvent(kysely, eventId))) throw new NotFoundError('no such event');
        const rows = await listAttempts(kysely, { eventId, sink, before: decodePosition(page.after), limit: page.limit + 1 });
        const { items, nextCursor } = pageOf(rows, page, (row) => encodePosition(row.position));
        res.json({ ok: true, attempts: items.map((row) => row.attempt), nextCursor });
      });
      router.post('/events/:id/resend', async (req, res) => {
        const body = resendBody.safeParse(req.body);
        if (!body.success) throw new InvalidRequestError('expected a JSON body {"sink": name}');
        await operations.resend(req.params.id as string, body.data.sink, requester(req));
        res.status(202).json({ ok: true, queued: 1 });
      });
      router.all('/events/:id/attempts', methodNotAllowed('GET'));
      router.all('/events/:id/resend', methodNotAllowed('POST'));
    },
  };
}
