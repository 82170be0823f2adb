import type { Kysely } from 'kysely';
import { DAY_MS, type Clock } from '../../clock.js';
import { InvalidRequestError, NotFoundError } from '../../errors.js';
import { untrusted } from '../../log.js';
import { sinkHealth } from '../../store/attempts/sink-health.js';
import { attemptsPerMinute, failedAttemptsOfSink } from '../../store/attempts/sink-attempts.js';
import { decodePosition, encodePosition } from './attempts.js';
import type { Schema } from '../../store/schema.js';
import { methodNotAllowed } from '../send-error.js';
import { z } from 'zod';
import { EVENT_ACCOUNT, eventIdShown } from './account-query.js';
import { attempt } from './attempts.js';
import { isoTime, okAnswer, pageAnswer, queryParam, reply, type AdminOperation } from './operation.js';
import { PAGE_QUERY, pageOf, queryText, readPage } from './pagination.js';
import type { AdminRoutes } from './router.js';

const WINDOW_MS: Record<string, number> = { '1h': DAY_MS / 24, '24h': DAY_MS };

const SINK_NAME = { name: 'A configured sink.' };
const WINDOW_QUERY = { window: queryParam('How far back: 1h (default) or 24h.', ['1h', '24h']) };

export const failedAttemptsOperation = {
  method: 'get',
  path: '/sinks/:name/failed-attempts',
  summary: "A sink's failed attempts, newest first.",
  params: SINK_NAME,
  query: PAGE_QUERY,
  answers: { 200: pageAnswer('attempts', attempt.extend({ eventId: z.string(), account: EVENT_ACCOUNT })) },
  errors: ['invalid_request', 'not_found'],
} as const satisfies AdminOperation;

export const attemptsPerMinuteOperation = {
  method: 'get',
  path: '/sinks/:name/attempts-per-minute',
  summary: "A sink's attempts per UTC minute of the window (every minute listed), by outcome.",
  params: SINK_NAME,
  query: WINDOW_QUERY,
  answers: {
    200: okAnswer({
      minutes: z.array(
        z.strictObject({
          start: isoTime().describe('The start of the UTC minute.'),
          delivered: z.number().int(),
          retried: z.number().int(),
          dead_lettered: z.number().int(),
        }),
      ),
    }),
  },
  errors: ['invalid_request', 'not_found'],
} as const satisfies AdminOperation;

export const sinkHealthOperation = {
  method: 'get',
  path: '/sinks/:name/health',
  summary: "A sink's attempts over the window: success rate, latency, statuses, last success and failure.",
  params: SINK_NAME,
  query: WINDOW_QUERY,
  answers: {
    200: okAnswer({
      health: z.strictObject({
        sink: z.string(),
        window: z.string().describe('`1h` or `24h`.'),
        attempts: z.number().int(),
        delivered: z.number().int(),
        failed: z.number().int(),
        successRate: z.number().nullable(),
        latencyMs: z.strictObject({ p50: z.number(), p95: z.number(), p99: z.number() }).nullable(),
        statuses: z.record(z.string(), z.number().int()).describe("Attempts by a hook's HTTP status."),
        lastSuccessAt: isoTime().nullable(),
        lastFailureAt: isoTime().nullable(),
        lastError: z.string().nullable(),
      }),
    }),
  },
  errors: ['invalid_request', 'not_found'],
} as const satisfies AdminOperation;

export interface SinkHealthDeps {
  kysely: Kysely<Schema>;
  clock: Clock;
  /** The configured sinks' names. */
  sinks: string[];
  /** Writes the attempts queued in this thread for their next batch, so health counts them. */
  flush(): Promise<void>;
}

/**
 * `GET /admin/sinks/:name/health?window=1h|24h` (contract section 16); for the console's sink page,
 * `GET /admin/sinks/:name/failed-attempts?limit=&cursor=` (newest first) and
 * `GET /admin/sinks/:name/attempts-per-minute?window=1h|24h`.
 */
export function sinkHealthRoutes({ kysely, clock, sinks, flush }: SinkHealthDeps): AdminRoutes {
  const configured = (name: unknown): string => {
    const sink = String(name);
    if (!sinks.includes(sink)) throw new NotFoundError(`no sink ${JSON.stringify(untrusted(sink))} is configured`);
    return sink;
  };
  const windowOf = (text: string | undefined): { window: string; windowMs: number } => {
    const window = text ?? '1h';
    const windowMs = WINDOW_MS[window];
    if (windowMs === undefined) throw new InvalidRequestError('window must be 1h or 24h');
    return { window, windowMs };
  };
  return {
    operations: [failedAttemptsOperation, attemptsPerMinuteOperation, sinkHealthOperation],
    mount(router) {
      router.get(failedAttemptsOperation.path, async (req, res) => {
        const page = readPage(req);
        const sink = configured(req.params.name);
        const rows = await failedAttemptsOfSink(kysely, { sink, before: decodePosition(page.after), limit: page.limit + 1 });
        const { items, nextCursor } = pageOf(rows, page, (row) => encodePosition(row.position));
        reply(res, failedAttemptsOperation, 200, { ok: true, attempts: items.map((row) => eventIdShown(row.attempt)), nextCursor });
      });
      router.get(attemptsPerMinuteOperation.path, async (req, res) => {
        const { windowMs } = windowOf(queryText(req, 'window'));
        const sink = configured(req.params.name);
        const now = clock.now();
        reply(res, attemptsPerMinuteOperation, 200, { ok: true, minutes: await attemptsPerMinute(kysely, { sink, since: now - windowMs, now }) });
      });
      router.get(sinkHealthOperation.path, async (req, res) => {
        const { window, windowMs } = windowOf(queryText(req, 'window'));
        const sink = configured(req.params.name);
        await flush();
        reply(res, sinkHealthOperation, 200, { ok: true, health: await sinkHealth(kysely, { sink, window, since: clock.now() - windowMs }) });
      });
      router.all('/sinks/:name/health', methodNotAllowed('GET'));
      router.all('/sinks/:name/failed-attempts', methodNotAllowed('GET'));
      router.all('/sinks/:name/attempts-per-minute', methodNotAllowed('GET'));
    },
  };
}
