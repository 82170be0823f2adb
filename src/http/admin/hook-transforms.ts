import type { Kysely } from 'kysely';
import type { HookConfig } from '../../config/schema.js';
import { toCloudEvent } from '../../events/cloudevent.js';
import { eventJson } from '../../sinks/failures.js';
import { globMatcher } from '../../sinks/route.js';
import { hookTransformOf, transformSourceOf } from '../../sinks/transform.js';
import type { Schema } from '../../store/schema.js';
import { methodNotAllowed } from '../send-error.js';
import { z } from 'zod';
import { ACCOUNT_OF_ID, accountOfKey, type AdminAccounts } from './account-query.js';
import { splitAccountKey } from '../../store/account-keys.js';
import { requireEvent } from './events.js';
import { okAnswer, reply, type AdminOperation } from './operation.js';
import type { AdminRoutes } from './router.js';

export interface HookTransformDeps {
  kysely: Kysely<Schema>;
  hooks: HookConfig[];
  accounts: AdminAccounts;
}

/** What stands in for pagerduty's routing key in what the admin API shows (a credential of the integration). */
const REDACTED = '[redacted]';

export const listHooksOperation = {
  method: 'get',
  path: '/hooks',
  summary: "Each hook's filter and transform, read only (no URL, header, secret or routing key).",
  answers: {
    200: okAnswer({
      hooks: z.array(
        z.strictObject({
          name: z.string(),
          events: z.array(z.string()),
          format: z.enum(['cloudevents', 'slack', 'teams', 'discord', 'pagerduty']),
          filter: z.string().nullable().describe('Its CEL filter.'),
          transform: z.string().nullable().describe("Its CEL transform: its own, or its built-in format's."),
          contentType: z.string().nullable(),
        }),
      ),
    }),
  },
  errors: [],
} as const satisfies AdminOperation;

export const eventBodiesOperation = {
  method: 'get',
  path: '/events/:id/bodies',
  summary: 'For one stored event, the body each hook with a transform makes of it (or its error), evaluated now: nothing is counted or sent.',
  params: { id: 'The event id.' },
  query: ACCOUNT_OF_ID,
  answers: {
    200: okAnswer({
      bodies: z.array(
        z.strictObject({
          sink: z.string(),
          skipped: z.boolean().describe('The transform gave null: nothing would be sent.'),
          contentType: z.string().nullable(),
          body: z.string().nullable(),
          error: z.strictObject({ code: z.string(), message: z.string() }).nullable(),
        }),
      ),
    }),
  },
  errors: ['invalid_request', 'not_found'],
} as const satisfies AdminOperation;

/**
 * `GET /admin/hooks`: each hook's filter and transform (its own, or its built-in format's source),
 * read only; no URL (chat webhook URLs hold their token), header, secret or routing key.
 * `GET /admin/events/:id/bodies`: for one stored event, the body each hook with a transform makes
 * of it (or the transform's error), evaluated on demand: nothing is counted or sent.
 */
export function hookTransformRoutes({ kysely, hooks, accounts }: HookTransformDeps): AdminRoutes {
  // Compiled once, with the routing key redacted.
  const transformed = hooks.flatMap((hook) => {
    const transform = hookTransformOf({ ...hook, routingKey: hook.routingKey && REDACTED });
    return transform ? [{ hook, transform, matches: hook.events.map(globMatcher) }] : [];
  });
  return {
    operations: [listHooksOperation, eventBodiesOperation],
    mount(router) {
      router.get(listHooksOperation.path, (_req, res) => {
        reply(res, listHooksOperation, 200, {
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
      router.get(eventBodiesOperation.path, async (req, res) => {
        const stored = await requireEvent(kysely, req, accounts);
        // The CloudEvent a hook is given: its account's, as the fan-out builds it.
        const event = toCloudEvent(stored.payload, accounts.source, stored.origin, accountOfKey(stored.id, accounts));
        const { account } = splitAccountKey(stored.id);
        const size = eventJson(event).length;
        const bodies = transformed
          // A hook that lists accounts is never given another account's event.
          .filter(({ hook, matches }) => (hook.accounts?.includes(account) ?? true) && matches.some((match) => match(event.type)))
          .map(({ hook, transform }) => {
            try {
              const made = transform.bodyOf(event, size);
              return { sink: hook.name, skipped: made === null, contentType: made?.contentType ?? null, body: made?.body ?? null, error: null };
            } catch (error) {
              const { code, message } = error as { code: string; message: string };
              return { sink: hook.name, skipped: false, contentType: null, body: null, error: { code, message } };
            }
          });
        reply(res, eventBodiesOperation, 200, { ok: true, bodies });
      });
      router.all('/hooks', methodNotAllowed('GET'));
      router.all('/events/:id/bodies', methodNotAllowed('GET'));
    },
  };
}
