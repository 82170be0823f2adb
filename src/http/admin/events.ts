import type { Request } from 'express';
import type { Kysely } from 'kysely';
import { InvalidRequestError, NotFoundError } from '../../errors.js';
import { toCloudEvent } from '../../events/cloudevent.js';
import { requireSince } from '../../iso-time.js';
import { accountKey, splitAccountKey } from '../../store/account-keys.js';
import { getEvent, listEvents, type EventPosition, type StoredEvent } from '../../store/state/events.js';
import type { Schema } from '../../store/schema.js';
import { methodNotAllowed } from '../send-error.js';
import { z } from 'zod';
import { ACCOUNT_FILTER, accountOfKey, accountParam, keyOfId, type AdminAccounts } from './account-query.js';
import { isoTime, pageAnswer, queryParam, reply, type AdminOperation } from './operation.js';
import { PAGE_QUERY, pageOf, queryText, readPage, type Page } from './pagination.js';
import type { AdminRoutes } from './router.js';

// The cursor carries the last position returned as "receivedAt:id" (the id may hold any character).
const encodePosition = ({ receivedAt, id }: EventPosition): string => `${receivedAt}:${id}`;

function decodePosition(after: Page['after']): EventPosition | undefined {
  if (after === undefined) return undefined;
  const match = typeof after === 'string' ? /^(\d{1,15}):(.+)$/s.exec(after) : null;
  if (!match) throw new InvalidRequestError('cursor is not one this server issued');
  return { receivedAt: Number(match[1]), id: match[2] as string };
}

/** A stored event as the admin API shows it: its CloudEvent (contract section 3) and when the relay received it. */
export const storedEvent = z.strictObject({
  specversion: z.literal('1.0'),
  id: z.string(),
  source: z.string(),
  type: z.string(),
  subject: z.string().optional(),
  time: z.string(),
  datacontenttype: z.literal('application/json'),
  data: z.record(z.string(), z.unknown()),
  boxrelayorigin: z.string().optional().describe('How a reconciliation run found the event (`history` or `synthesized`); absent on received webhooks.'),
  boxrelayaccount: z.string().describe("The event's account (contract section 21), `default` included."),
  account: z.string().describe('The account the event came to (contract section 21); its `id` is the upstream\'s, unique within the account.'),
  receivedAt: isoTime(),
});

/** A stored event as the admin API shows it: under its account, with the upstream's id. */
export function shownEvent(stored: StoredEvent, accounts: AdminAccounts): z.input<typeof storedEvent> {
  return {
    ...toCloudEvent(stored.payload, accounts.source, stored.origin, accountOfKey(stored.id, accounts)),
    account: splitAccountKey(stored.id).account,
    receivedAt: new Date(stored.receivedAt).toISOString(),
  };
}

/** The stored event `/admin/events/:id…?account=` names; 404 `not_found` when there is none. */
export async function requireEvent(kysely: Kysely<Schema>, req: Request, accounts: AdminAccounts): Promise<StoredEvent & { type: string }> {
  const key = keyOfId(req, accounts, req.params.id as string);
  const stored = key === undefined ? undefined : await getEvent(kysely, key);
  if (!stored) throw new NotFoundError('no such event');
  return stored;
}

export const listEventsOperation = {
  method: 'get',
  path: '/events',
  summary: 'Stored events, newest first.',
  query: {
    type: queryParam('Only events of this type.'),
    boxId: queryParam("Only the events of boxes of this id (in `account`, if given)."),
    since: queryParam('Only events received at or after this ISO 8601 time (with a zone).'),
    ...ACCOUNT_FILTER,
    ...PAGE_QUERY,
  },
  answers: { 200: pageAnswer('events', storedEvent) },
  errors: ['invalid_request'],
} as const satisfies AdminOperation;

/** `GET /admin/events?type=&boxId=&since=&account=&limit=&cursor=`: stored events, newest first. */
export function eventRoutes(kysely: Kysely<Schema>, accounts: AdminAccounts): AdminRoutes {
  return {
    operations: [listEventsOperation],
    mount(router) {
      router.get(listEventsOperation.path, async (req, res) => {
        const page = readPage(req);
        const since = queryText(req, 'since');
        const account = accountParam(req, accounts);
        const boxId = queryText(req, 'boxId');
        // A box's key names its account: without `account=`, the box of that id in each account.
        const boxKeys = boxId === undefined ? undefined : (account === undefined ? accounts.names : [account]).map((name) => accountKey(name, boxId));
        const rows = await listEvents(kysely, {
          type: queryText(req, 'type'),
          boxKeys,
          account: boxKeys === undefined ? account : undefined,
          bytewise: await accounts.bytewise(),
          since: since === undefined ? undefined : requireSince(since),
          before: decodePosition(page.after),
          limit: page.limit + 1,
        });
        const { items, nextCursor } = pageOf(rows, page, encodePosition);
        reply(res, listEventsOperation, 200, {
          ok: true,
          events: items.map((row) => shownEvent(row, accounts)),
          nextCursor,
        });
      });
      router.all('/events', methodNotAllowed('GET'));
    },
  };
}
