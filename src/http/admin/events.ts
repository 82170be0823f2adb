import type { Kysely } from 'kysely';
import { InvalidRequestError } from '../../errors.js';
import { toCloudEvent } from '../../events/cloudevent.js';
import { requireSince } from '../../iso-time.js';
import { listEvents, type EventPosition } from '../../store/state/events.js';
import type { Schema } from '../../store/schema.js';
import { methodNotAllowed } from '../send-error.js';
import { pageOf, queryText, readPage, type Page } from './pagination.js';
import type { AdminRoutes } from './router.js';

// The cursor carries the last position returned as "receivedAt:id" (the id may hold any character).
const encodePosition = ({ receivedAt, id }: EventPosition): string => `${receivedAt}:${id}`;

function decodePosition(after: Page['after']): EventPosition | undefined {
  if (after === undefined) return undefined;
  const match = typeof after === 'string' ? /^(\d{1,15}):(.+)$/s.exec(after) : null;
  if (!match) throw new InvalidRequestError('cursor is not one this server issued');
  return { receivedAt: Number(match[1]), id: match[2] as string };
}

/** `GET /admin/events?type=&boxId=&since=&limit=&cursor=`: stored events, newest first. */
export function eventRoutes(kysely: Kysely<Schema>, source: string): AdminRoutes {
  return {
    mount(router) {
      router.get('/events', async (req, res) => {
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
        res.json({
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
