import type { Outbox } from '../../store/outbox.js';
import { NATS_SINK } from '../../sinks/route.js';
import type { Sink } from '../../sinks/sink.js';
import { methodNotAllowed } from '../send-error.js';
import type { AdminRoutes } from './router.js';

/** `GET /admin/sinks`: each configured sink with its connection state and queue sizes. */
export function sinkRoutes({ sinks, outbox }: { sinks: Pick<Sink, 'name' | 'up'>[]; outbox: Pick<Outbox, 'countBySink'> }): AdminRoutes {
  return {
    mount(router) {
      router.get('/sinks', async (_req, res) => {
        const [pending, dead] = await Promise.all([outbox.countBySink('pending'), outbox.countBySink('dead')]);
        res.json({
          ok: true,
          sinks: sinks.map((sink) => ({
            name: sink.name,
            kind: sink.name === NATS_SINK ? 'nats' : 'hook',
            up: sink.up(),
            // Pausing is not built yet: no sink is ever paused.
            paused: false,
            pending: pending[sink.name] ?? 0,
            deadLetters: dead[sink.name] ?? 0,
          })),
        });
      });
      router.all('/sinks', methodNotAllowed('GET'));
    },
  };
}
