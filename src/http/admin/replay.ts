import { z } from 'zod';
import type { Operations } from '../../dispatch/operations.js';
import { InvalidRequestError } from '../../errors.js';
import { methodNotAllowed } from '../send-error.js';
import { requester } from './requester.js';
import type { AdminRoutes } from './router.js';

const replayBody = z.strictObject({ since: z.string(), sink: z.string().optional() });

/** `POST /admin/replay {"since": ISO, "sink"?: name}`: queues stored deliveries again. */
export function replayRoutes(operations: Operations): AdminRoutes {
  return {
    mount(router) {
      router.post('/replay', async (req, res) => {
        const body = replayBody.safeParse(req.body);
        if (!body.success) throw new InvalidRequestError('expected a JSON body {"since": ISO 8601 time, "sink"?: name}');
        const queued = await operations.replay(body.data, requester(req));
        res.status(202).json({ ok: true, queued });
      });
      router.all('/replay', methodNotAllowed('POST'));
    },
  };
}
