import type { Kysely } from 'kysely';
import { DAY_MS, type Clock } from '../../clock.js';
import { InvalidRequestError, NotFoundError } from '../../errors.js';
import { untrusted } from '../../log.js';
import { sinkHealth } from '../../store/attempts/sink-health.js';
import { attemptsPerMinute, failedAttemptsOfSink } from '../../store/attempts/sink-attempts.js';
import { decodePosition, encodePosition } from './attempts.js';
import type { Schema } from '../../store/schema.js';
import { methodNotAllowed } from '../send-error.js';
import { pageOf, queryText, readPage } from './pagination.js';
import type { AdminRoutes } from './router.js';

const WINDOW_MS: Record<string, number> = { '1h': DAY_MS / 24, '24h': DAY_MS };

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
    mount(router) {
      router.get('/sinks/:name/failed-attempts', async (req, res) => {
        const page = readPage(req);
        const sink = configured(req.params.name);
        const rows = await failedAttemptsOfSink(kysely, { sink, before: decodePosition(page.after), limit: page.limit + 1 });
        const { items, nextCursor } = pageOf(rows, page, (row) => encodePosition(row.position));
        res.json({ ok: true, attempts: items.map((row) => row.attempt), nextCursor });
      });
      router.get('/sinks/:name/attempts-per-minute', async (req, res) => {
        const { windowMs } = windowOf(queryText(req, 'window'));
        const sink = configured(req.params.name);
        const now = clock.now();
        res.json({ ok: true, minutes: await attemptsPerMinute(kysely, { sink, since: now - windowMs, now }) });
      });
      router.get('/sinks/:name/health', async (req, res) => {
        const { window, windowMs } = windowOf(queryText(req, 'window'));
        const sink = configured(req.params.name);
        await flush();
        res.json({ ok: true, health: await sinkHealth(kysely, { sink, window, since: clock.now() - windowMs }) });
      });
      router.all('/sinks/:name/health', methodNotAllowed('GET'));
      router.all('/sinks/:name/failed-attempts', methodNotAllowed('GET'));
      router.all('/sinks/:name/attempts-per-minute', methodNotAllowed('GET'));
    },
  };
}
