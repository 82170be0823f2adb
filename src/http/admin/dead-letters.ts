import type { Request } from 'express';
import { z } from 'zod';
import type { Operations } from '../../dispatch/operations.js';
import { InvalidRequestError } from '../../errors.js';
import type { DeadLetter } from '../../store/exceptions/rows.js';
import { methodNotAllowed } from '../send-error.js';
import { EVENT_ACCOUNT, eventIdShown } from './account-query.js';
import { isoTime, okAnswer, pageAnswer, queryParam, reply, type AdminOperation } from './operation.js';
import { PAGE_QUERY, pageOf, queryText, readPage } from './pagination.js';
import { requester } from './requester.js';
import type { AdminRoutes } from './router.js';

/** An id from the path; anything that is not one becomes NaN, which operations refuse (400). */
const idOf = (req: Request): number => (/^\d{1,15}$/.test(String(req.params.id)) ? Number(req.params.id) : Number.NaN);

const retryAllBody = z.strictObject({ sink: z.string().optional().describe('Only the dead letters of this sink.') });

const view = (d: DeadLetter) => ({ ...eventIdShown(d), failedAt: new Date(d.failedAt).toISOString() });

const deadLetter = z.strictObject({
  id: z.number().int().describe('The dead letter id (not the event id).'),
  eventId: z.string(),
  account: EVENT_ACCOUNT,
  sink: z.string(),
  attempts: z.number().int(),
  lastError: z.string().nullable(),
  failedAt: isoTime(),
});

const DEAD_LETTER_ID = { id: 'The dead letter id (a whole number).' };

export const listDeadLettersOperation = {
  method: 'get',
  path: '/dead-letters',
  summary: 'Dead letters, by id.',
  query: { sink: queryParam('Only the dead letters of this sink.'), ...PAGE_QUERY },
  answers: { 200: pageAnswer('deadLetters', deadLetter) },
  errors: ['invalid_request'],
} as const satisfies AdminOperation;

export const retryAllOperation = {
  method: 'post',
  path: '/dead-letters/retry',
  summary: 'Retries every dead letter (of one sink) at once (audited).',
  body: { schema: retryAllBody, required: false },
  answers: { 202: okAnswer({ retried: z.number().int().describe('How many dead letters were queued again.') }) },
  errors: ['invalid_request', 'payload_too_large', 'storage_unavailable'],
} as const satisfies AdminOperation;

export const retryOperation = {
  method: 'post',
  path: '/dead-letters/:id/retry',
  summary: 'Retries one dead letter (audited).',
  params: DEAD_LETTER_ID,
  answers: { 202: okAnswer({}) },
  errors: ['invalid_request', 'not_found', 'storage_unavailable'],
} as const satisfies AdminOperation;

export const discardOperation = {
  method: 'delete',
  path: '/dead-letters/:id',
  summary: 'Discards one dead letter: its row stays, as `discarded` (audited).',
  params: DEAD_LETTER_ID,
  answers: { 204: null },
  errors: ['invalid_request', 'not_found', 'storage_unavailable'],
} as const satisfies AdminOperation;

/**
 * `GET /admin/dead-letters`, `POST /admin/dead-letters/:id/retry`, `DELETE /admin/dead-letters/:id`,
 * and `POST /admin/dead-letters/retry {"sink"?: name}`: every dead letter (of one sink) at once.
 */
export function deadLetterRoutes(operations: Operations): AdminRoutes {
  return {
    operations: [listDeadLettersOperation, retryAllOperation, retryOperation, discardOperation],
    mount(router) {
      router.get(listDeadLettersOperation.path, async (req, res) => {
        const page = readPage(req);
        if (page.after !== undefined && typeof page.after !== 'number') throw new InvalidRequestError('cursor is not one this server issued');
        const rows = await operations.list({ sink: queryText(req, 'sink'), after: page.after, limit: page.limit + 1 });
        const { items, nextCursor } = pageOf(rows, page, (d) => d.id);
        reply(res, listDeadLettersOperation, 200, { ok: true, deadLetters: items.map(view), nextCursor });
      });
      // Registered before the `:id` routes, which would take `retry` for an id.
      router.post(retryAllOperation.path, async (req, res) => {
        const body = retryAllBody.safeParse(req.body ?? {});
        if (!body.success) throw new InvalidRequestError('expected a JSON body {"sink"?: name}');
        const retried = await operations.retryAll(body.data.sink, requester(req));
        reply(res, retryAllOperation, 202, { ok: true, retried });
      });
      router.post(retryOperation.path, async (req, res) => {
        await operations.retry(idOf(req), requester(req));
        reply(res, retryOperation, 202, { ok: true });
      });
      router.delete(discardOperation.path, async (req, res) => {
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
