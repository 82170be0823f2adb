import type { Kysely } from 'kysely';
import { InvalidRequestError } from '../../errors.js';
import { toCloudEvent } from '../../events/cloudevent.js';
import { requireSince } from '../../iso-time.js';
import { listEvents, type EventPosition } from '../../store/state/events.js';
import type { Schema } from '../../store/schema.js';
import { methodNotAllowed } from '../send-error.js';
import { z } from 'zod';
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
  receivedAt: isoTime(),
});

export const listEventsOperation = {
  method: 'get',
  path: '/events',
  summary: 'Stored events, newest first.',
  query: {
    type: queryParam('Only events of this type.'),
    boxId: queryParam("Only this box's events."),
    since: queryParam('Only events received at or after this ISO 8601 time (with a zone).'),
    ...PAGE_QUERY,
  },
  answers: { 200: pageAnswer('events', storedEvent) },
  errors: ['invalid_request'],
} as const satisfies AdminOperation;

/** `GET /admin/events?type=&boxId=&since=&limit=&cursor=`: stored events, newest first. */
export function eventRoutes(kysely: Kysely<Schema>, source: string): AdminRoutes {
  return {
    operations: [listEventsOperation],
    mount(router) {
      router.get(listEventsOperation.path, async (req, res) => {
        const page = readPage(req);
        const since = queryText(req, 'since');
        const rows = await listEvents(kysely, {
          type: queryText(req, 'type'),
          boxId: queryText(req, 'boxId'),
          since: since === undefined ? undefined : requireSince(since),
          before: decodePosition(page.after),
          limit: page.limit + 1,
        });
        const { items, nextCursor } = pageOf(rows, page, encodePosition);
        reply(res, listEventsOperation, 200, {
          ok: true,
          events: items.map((row) => ({
            ...toCloudEvent(row.payload, source, row.origin),
            receivedAt: new Date(row.receivedAt).toISOString(),
          })),
          nextCursor,
        });
      });
      router.all('/events', methodNotAllowed('GET'));
    },
  };
}
