import { NotFoundError } from '../../errors.js';
import { untrusted } from '../../log.js';
import type { Pauses } from '../../dispatch/pauses.js';
import { BUS_NAMES } from '../../config/schema.js';
import type { Sink } from '../../sinks/sink.js';
import type { SinkStates } from '../../store/state/sink-state.js';
import { methodNotAllowed } from '../send-error.js';
import type { AuditTrail } from '../../audit-trail.js';
import { requester } from './requester.js';
import { z } from 'zod';
import { okAnswer, reply, type AdminOperation } from './operation.js';
import type { AdminRoutes } from './router.js';

export interface SinkRoutesDeps {
  sinks: Pick<Sink, 'name' | 'up' | 'throttled'>[];
  sinkStates: SinkStates;
  pauses: Pauses;
  countBySink(kind: 'pending' | 'deadLetters'): Promise<Record<string, number>>;
  trail: AuditTrail;
}

const sinkRow = z.strictObject({
  name: z.string(),
  kind: z.string().describe('A bus\'s name (`nats`, `amqp`, …), or `hook`.'),
  up: z.boolean(),
  paused: z.boolean(),
  pending: z.number().int(),
  throttled: z.boolean().describe("Attempts wait for their turn under the hook's maxPerSecond."),
  deadLetters: z.number().int(),
});

const SINK_NAME = { name: 'A configured sink.' };

export const listSinksOperation = {
  method: 'get',
  path: '/sinks',
  summary: 'Each configured sink: up, paused, pending and dead letters.',
  answers: { 200: okAnswer({ sinks: z.array(sinkRow) }) },
  errors: [],
} as const satisfies AdminOperation;

/** Pause and resume: the same change of a sink, each answering its row. */
const sinkChange = <V extends 'pause' | 'resume'>(verb: V, summary: string) =>
  ({
    method: 'post',
    path: `/sinks/:name/${verb}`,
    summary,
    params: SINK_NAME,
    answers: { 200: okAnswer({ sink: sinkRow }) },
    errors: ['not_found', 'storage_unavailable'],
  }) as const satisfies AdminOperation;

export const pauseOperation = sinkChange('pause', 'Pauses a sink (audited); answers its row.');
export const resumeOperation = sinkChange('resume', 'Resumes a paused sink (audited); answers its row.');

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
  /** One sink's row (the list of one). */
  const rowOf = async (sink: Pick<Sink, 'name' | 'up' | 'throttled'>) => (await rows(sink))[0] as z.infer<typeof sinkRow>;
  const configured = (name: unknown): Pick<Sink, 'name' | 'up' | 'throttled'> => {
    const sink = sinks.find((s) => s.name === name);
    if (!sink) throw new NotFoundError(`no sink ${JSON.stringify(untrusted(String(name)))} is configured`);
    return sink;
  };
  return {
    operations: [listSinksOperation, pauseOperation, resumeOperation],
    mount(router) {
      router.get(listSinksOperation.path, async (_req, res) => {
        reply(res, listSinksOperation, 200, { ok: true, sinks: await rows() });
      });
      router.post(pauseOperation.path, async (req, res) => {
        const sink = configured(req.params.name);
        await trail.record({ action: 'pause', target: sink.name, by: requester(req), detail: { sink: sink.name } }, (audit) =>
          pauses.pauseByOperator(sink.name, audit),
        );
        reply(res, pauseOperation, 200, { ok: true, sink: await rowOf(sink) });
      });
      router.post(resumeOperation.path, async (req, res) => {
        const sink = configured(req.params.name);
        await trail.record({ action: 'resume', target: sink.name, by: requester(req), detail: { sink: sink.name } }, (audit) =>
          pauses.resume(sink.name, 'operator', audit),
        );
        reply(res, resumeOperation, 200, { ok: true, sink: await rowOf(sink) });
      });
      router.all('/sinks', methodNotAllowed('GET'));
      router.all('/sinks/:name/pause', methodNotAllowed('POST'));
      router.all('/sinks/:name/resume', methodNotAllowed('POST'));
    },
  };
}
