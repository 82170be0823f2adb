import type { Kysely } from 'kysely';
import { eventDeliveries } from '../../dispatch/delivery-status.js';
import { NotFoundError } from '../../errors.js';
import { toCloudEvent } from '../../events/cloudevent.js';
import { getEvent } from '../../store/state/events.js';
import type { FanoutStore } from '../../store/fanout-store.js';
import type { Schema } from '../../store/schema.js';
import { methodNotAllowed } from '../send-error.js';
import type { AdminRoutes } from './router.js';

export interface EventDeliveryDeps {
  kysely: Kysely<Schema>;
  exceptions: Pick<FanoutStore['exceptions'], 'rowsOfEvent'>;
  source: string;
}

/** `GET /admin/events/:id`: one stored event and where it stands with each sink. */
export function eventDeliveryRoutes({ kysely, exceptions, source }: EventDeliveryDeps): AdminRoutes {
  return {
    mount(router) {
      router.get('/events/:id', async (req, res) => {
        const id = req.params.id as string;
        const stored = await getEvent(kysely, id);
        if (!stored) throw new NotFoundError('no such event');
        const rows = await exceptions.rowsOfEvent(id);
        res.json({
          ok: true,
          event: { ...toCloudEvent(stored.payload, source, stored.origin), receivedAt: new Date(stored.receivedAt).toISOString() },
          deliveries: eventDeliveries(rows),
        });
      });
      router.all('/events/:id', methodNotAllowed('GET'));
    },
  };
}
