import { z } from 'zod';
import type { Operations } from '../../dispatch/operations.js';
import { InvalidRequestError } from '../../errors.js';
import { methodNotAllowed } from '../send-error.js';
import { requester } from './requester.js';
import { okAnswer, reply, type AdminOperation } from './operation.js';
import type { AdminRoutes } from './router.js';

const replayBody = z.strictObject({
  since: z.string().describe('ISO 8601 time with a zone: the deliveries received since then are queued again.'),
  sink: z.string().optional().describe('Only to this sink.'),
});

export const replayOperation = {
  method: 'post',
  path: '/replay',
  summary: 'Queues stored deliveries again, keeping their event ids (audited).',
  body: { schema: replayBody, required: true },
  answers: { 202: okAnswer({ queued: z.number().int().describe('How many deliveries were queued.') }) },
  errors: ['invalid_request', 'payload_too_large', 'storage_unavailable'],
} as const satisfies AdminOperation;

/** `POST /admin/replay {"since": ISO, "sink"?: name}`: queues stored deliveries again. */
export function replayRoutes(operations: Operations): AdminRoutes {
  return {
    operations: [replayOperation],
    mount(router) {
      router.post(replayOperation.path, async (req, res) => {
        const body = replayBody.safeParse(req.body);
        if (!body.success) throw new InvalidRequestError('expected a JSON body {"since": ISO 8601 time, "sink"?: name}');
        const queued = await operations.replay(body.data, requester(req));
        reply(res, replayOperation, 202, { ok: true, queued });
      });
      router.all('/replay', methodNotAllowed('POST'));
    },
  };
}
