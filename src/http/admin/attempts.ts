import type { Kysely } from 'kysely';
import { z } from 'zod';
import type { Operations } from '../../dispatch/operations.js';
import { InvalidRequestError, NotFoundError } from '../../errors.js';
import { listAttempts, type AttemptPosition } from '../../store/attempts/list-attempts.js';
import type { Schema } from '../../store/schema.js';
import { methodNotAllowed } from '../send-error.js';
import { ACCOUNT_OF_ID, keyOfId, type AdminAccounts } from './account-query.js';
import { requireEvent } from './events.js';
import { isoTime, okAnswer, pageAnswer, queryParam, reply, type AdminOperation } from './operation.js';
import { PAGE_QUERY, pageOf, queryText, readPage, type Page } from './pagination.js';
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

const resendBody = z.strictObject({ sink: z.string().min(1).describe('The sink to send the event to again.') });

const headers = z.record(z.string(), z.string());

/** One delivery attempt (contract section 16). */
export const attempt = z.strictObject({
  sink: z.string(),
  n: z.number().int().describe("The attempt's number for this event and sink, from 1."),
  at: isoTime(),
  durationMs: z.number(),
  outcome: z.enum(['delivered', 'retried', 'dead_lettered']),
  status: z.number().int().nullable().describe("A hook's HTTP status."),
  error: z.strictObject({ code: z.string(), message: z.string() }).nullable(),
  request: z.strictObject({ url: z.string(), headers }).nullable().describe('What a hook sent (extra header values redacted, no signature).'),
  response: z.strictObject({ headers, body: z.string(), bodyTruncated: z.boolean() }).nullable().describe('What a hook answered: its headers and the first bytes of its body.'),
});

const EVENT_ID = { id: 'The event id.' };

export const listAttemptsOperation = {
  method: 'get',
  path: '/events/:id/attempts',
  summary: "An event's delivery attempts, newest first.",
  params: EVENT_ID,
  query: { sink: queryParam('Only the attempts to this sink.'), ...ACCOUNT_OF_ID, ...PAGE_QUERY },
  answers: { 200: pageAnswer('attempts', attempt) },
  errors: ['invalid_request', 'not_found'],
} as const satisfies AdminOperation;

export const resendOperation = {
  method: 'post',
  path: '/events/:id/resend',
  summary: 'Sends one stored event to one sink again (audited).',
  params: EVENT_ID,
  query: ACCOUNT_OF_ID,
  body: { schema: resendBody, required: true },
  answers: { 202: okAnswer({ queued: z.literal(1) }) },
  errors: ['invalid_request', 'not_found', 'payload_too_large', 'storage_unavailable'],
} as const satisfies AdminOperation;

/**
 * `GET /admin/events/:id/attempts?sink=&account=&limit=&cursor=` (newest first) and `POST
 * /admin/events/:id/resend?account= {"sink"}` (contract section 16).
 */
export function attemptRoutes({ kysely, operations, accounts }: { kysely: Kysely<Schema>; operations: Pick<Operations, 'resend'>; accounts: AdminAccounts }): AdminRoutes {
  return {
    operations: [listAttemptsOperation, resendOperation],
    mount(router) {
      router.get(listAttemptsOperation.path, async (req, res) => {
        const page = readPage(req);
        const sink = queryText(req, 'sink');
        const { id: eventId } = await requireEvent(kysely, req, accounts);
        const rows = await listAttempts(kysely, { eventId, sink, before: decodePosition(page.after), limit: page.limit + 1 });
        const { items, nextCursor } = pageOf(rows, page, (row) => encodePosition(row.position));
        reply(res, listAttemptsOperation, 200, { ok: true, attempts: items.map((row) => row.attempt), nextCursor });
      });
      router.post(resendOperation.path, async (req, res) => {
        const body = resendBody.safeParse(req.body);
        if (!body.success) throw new InvalidRequestError('expected a JSON body {"sink": name}');
        const key = keyOfId(req, accounts, req.params.id as string);
        if (key === undefined) throw new NotFoundError('no such event');
        await operations.resend(key, body.data.sink, requester(req));
        reply(res, resendOperation, 202, { ok: true, queued: 1 });
      });
      router.all('/events/:id/attempts', methodNotAllowed('GET'));
      router.all('/events/:id/resend', methodNotAllowed('POST'));
    },
  };
}
