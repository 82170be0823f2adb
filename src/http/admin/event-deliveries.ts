import type { Kysely } from 'kysely';
import { eventDeliveries } from '../../dispatch/delivery-status.js';
import type { FanoutStore } from '../../store/fanout-store.js';
import type { Schema } from '../../store/schema.js';
import { methodNotAllowed } from '../send-error.js';
import { z } from 'zod';
import { ACCOUNT_OF_ID, type AdminAccounts } from './account-query.js';
import { requireEvent, shownEvent, storedEvent } from './events.js';
import { isoTime, okAnswer, reply, type AdminOperation } from './operation.js';
import type { AdminRoutes } from './router.js';

export interface EventDeliveryDeps {
  kysely: Kysely<Schema>;
  exceptions: Pick<FanoutStore['exceptions'], 'rowsOfEvent'>;
  accounts: AdminAccounts;
}

export const getEventOperation = {
  method: 'get',
  path: '/events/:id',
  summary: 'One stored event and where it stands with each sink it was routed to.',
  params: { id: 'The event id (also given as `/admin/events/?id=<id>`, for an id a browser cannot put in a path).' },
  query: ACCOUNT_OF_ID,
  answers: {
    200: okAnswer({
      event: storedEvent,
      deliveries: z.array(
        z.strictObject({
          sink: z.string(),
          status: z.enum(['pending', 'delivered', 'dead_lettered', 'discarded', 'set_aside']),
          attempts: z.number().int(),
          lastError: z.string().nullable(),
          updatedAt: isoTime(),
        }),
      ),
    }),
  },
  errors: ['invalid_request', 'not_found'],
} as const satisfies AdminOperation;

/** `GET /admin/events/:id?account=`: one stored event and where it stands with each sink. */
export function eventDeliveryRoutes({ kysely, exceptions, accounts }: EventDeliveryDeps): AdminRoutes {
  return {
    operations: [getEventOperation],
    mount(router) {
      router.get(getEventOperation.path, async (req, res) => {
        const stored = await requireEvent(kysely, req, accounts);
        const rows = await exceptions.rowsOfEvent(stored.id);
        reply(res, getEventOperation, 200, {
          ok: true,
          event: shownEvent(stored, accounts),
          deliveries: eventDeliveries(rows),
        });
      });
      router.all('/events/:id', methodNotAllowed('GET'));
    },
  };
}
