import { NotFoundError } from '../../errors.js';
import { untrusted } from '../../log.js';
import type { Pauses } from '../../dispatch/pauses.js';
import { BUS_NAMES } from '../../config/schema.js';
import type { Sink } from '../../sinks/sink.js';
import type { SinkStates } from '../../store/state/sink-state.js';
import { methodNotAllowed } from '../send-error.js';
import type { AuditTrail } from '../../audit-trail.js';
import { requester } from './requester.js';
import type { AdminRoutes } from './router.js';

export interface SinkRoutesDeps {
  sinks: Pick<Sink, 'name' | 'up' | 'throttled'>[];
  sinkStates: SinkStates;
  pauses: Pauses;
  countBySink(kind: 'pending' | 'deadLetters'): Promise<Record<string, number>>;
  trail: AuditTrail;
}

/** `GET /admin/sinks`; `POST /admin/sinks/:name/pause` and `/resume` answer with that sink's row (contract section 6). */
export function sinkRoutes({ sinks, sinkStates, pauses, countBySink, trail }: SinkRoutesDeps): AdminRoutes {
  const rows = async (only?: Pick<Sink, 'name' | 'up' | 'throttled'>) => {
    const [states, pending, dead] = await Promise.all([sinkStates.readAll(), countBySink('pending'), countBySink('deadLetters')]);
    return (only ? [only] : sinks).map((sink) => ({
      name: sink.name,
      // A bus's kind is its name (contract section 12); hooks cannot take those names.
      kind: (BUS_NAMES as readonly string[]).includes(sink.name) ? sink.name : 'hook',
      up: sink.up(),
      paused: states.get(sink.name)?.paused_at != null,
      pending: pending[sink.name] ?? 0,
      // Attempts waiting for their turn under the hook's maxPerSecond (contract section 14).
      throttled: (sink.throttled?.() ?? 0) > 0,
      deadLetters: dead[sink.name] ?? 0,
    }));
  };
  const configured = (name: unknown): Pick<Sink, 'name' | 'up' | 'throttled'> => {
    const sink = sinks.find((s) => s.name === name);
    if (!sink) throw new NotFoundError(`no sink ${JSON.stringify(untrusted(String(name)))} is configured`);
    return sink;
  };
  return {
    mount(router) {
      router.get('/sinks', async (_req, res) => {
        res.json({ ok: true, sinks: await rows() });
      });
      router.post('/sinks/:name/pause', async (req, res) => {
        const sink = configured(req.params.name);
        await trail.record({ action: 'pause', target: sink.name, by: requester(req), detail: { sink: sink.name } }, (audit) =>
          pauses.pauseByOperator(sink.name, audit),
        );
        res.json({ ok: true, sink: (await rows(sink))[0] });
      });
      router.post('/sinks/:name/resume', async (req, res) => {
        const sink = configured(req.params.name);
        await trail.record({ action: 'resume', target: sink.name, by: requester(req), detail: { sink: sink.name } }, (audit) =>
          pauses.resume(sink.name, 'operator', audit),
        );
        res.json({ ok: true, sink: (await rows(sink))[0] });
      });
      router.all('/sinks', methodNotAllowed('GET'));
      router.all('/sinks/:name/pause', methodNotAllowed('POST'));
      router.all('/sinks/:name/resume', methodNotAllowed('POST'));
    },
  };
}
