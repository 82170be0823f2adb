import type { Kysely } from 'kysely';
import type { HookConfig } from '../../config/schema.js';
import { NotFoundError } from '../../errors.js';
import { toCloudEvent } from '../../events/cloudevent.js';
import { eventJson } from '../../sinks/failures.js';
import { globMatcher } from '../../sinks/route.js';
import { hookTransformOf, transformSourceOf } from '../../sinks/transform.js';
import { getEvent } from '../../store/state/events.js';
import type { Schema } from '../../store/schema.js';
import { methodNotAllowed } from '../send-error.js';
import type { AdminRoutes } from './router.js';

export interface HookTransformDeps {
  kysely: Kysely<Schema>;
  hooks: HookConfig[];
  source: string;
}

/** What stands in for pagerduty's routing key in what the admin API shows (a credential of the integration). */
const REDACTED = '[redacted]';

/**
 * `GET /admin/hooks`: each hook's filter and transform (its own, or its built-in format's source),
 * read only; no URL (chat webhook URLs hold their token), header, secret or routing key.
 * `GET /admin/events/:id/bodies`: for one stored event, the body each hook with a transform makes
 * of it (or the transform's error), evaluated on demand: nothing is counted or sent.
 */
export function hookTransformRoutes({ kysely, hooks, source }: HookTransformDeps): AdminRoutes {
  // Compiled once, with the routing key redacted.
  const transformed = hooks.flatMap((hook) => {
    const transform = hookTransformOf({ ...hook, routingKey: hook.routingKey && REDACTED });
    return transform ? [{ hook, transform, matches: hook.events.map(globMatcher) }] : [];
  });
  return {
    mount(router) {
      router.get('/hooks', (_req, res) => {
        res.json({
          ok: true,
          hooks: hooks.map((hook) => ({
            name: hook.name,
            events: hook.events,
            format: hook.format,
            filter: hook.filter ?? null,
            transform: transformSourceOf(hook) ?? null,
            contentType: hook.contentType ?? null,
          })),
        });
      });
      router.get('/events/:id/bodies', async (req, res) => {
        const stored = await getEvent(kysely, req.params.id as string);
        if (!stored) throw new NotFoundError('no such event');
        const event = toCloudEvent(stored.payload, source, stored.origin);
        const size = eventJson(event).length;
        const bodies = transformed
          .filter(({ matches }) => matches.some((match) => match(event.type)))
          .map(({ hook, transform }) => {
            try {
              const made = transform.bodyOf(event, size);
              return { sink: hook.name, skipped: made === null, contentType: made?.contentType ?? null, body: made?.body ?? null, error: null };
            } catch (error) {
              const { code, message } = error as { code: string; message: string };
              return { sink: hook.name, skipped: false, contentType: null, body: null, error: { code, message } };
            }
          });
        res.json({ ok: true, bodies });
      });
      router.all('/hooks', methodNotAllowed('GET'));
      router.all('/events/:id/bodies', methodNotAllowed('GET'));
    },
  };
}
