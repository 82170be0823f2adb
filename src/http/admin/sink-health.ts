import type { Kysely } from 'kysely';
import { DAY_MS, type Clock } from '../../clock.js';
import { InvalidRequestError, NotFoundError } from '../../errors.js';
import { untrusted } from '../../log.js';
import { sinkHealth, type AttemptsMode } from '../../store/attempts/sink-health.js';
import type { Schema } from '../../store/schema.js';
import { methodNotAllowed } from '../send-error.js';
import { queryText } from './pagination.js';
import type { AdminRoutes } from './router.js';

const WINDOW_MS: Record<string, number> = { '1h': DAY_MS / 24, '24h': DAY_MS };

export interface SinkHealthDeps {
  kysely: Kysely<Schema>;
  clock: Clock;
  /** The configured sinks' names. */
  sinks: string[];
  mode: AttemptsMode;
  /** Stores the delivery counts this process holds (health reads them when successes are not recorded). */
  flush(): Promise<void>;
}

/** `GET /admin/sinks/:name/health?window=1h|24h` (contract section 16). */
export function sinkHealthRoutes({ kysely, clock, sinks, mode, flush }: SinkHealthDeps): AdminRoutes {
  return {
    mount(router) {
      router.get('/sinks/:name/health', async (req, res) => {
        const sink = req.params.name as string;
        const window = queryText(req, 'window') ?? '1h';
        const windowMs = WINDOW_MS[window];
        if (windowMs === undefined) throw new InvalidRequestError('window must be 1h or 24h');
        if (!sinks.includes(sink)) throw new NotFoundError(`no sink ${JSON.stringify(untrusted(sink))} is configured`);
        if (mode !== 'all') await flush();
        res.json({ ok: true, health: await sinkHealth(kysely, { sink, window, since: clock.now() - windowMs, mode }) });
      });
      router.all('/sinks/:name/health', methodNotAllowed('GET'));
    },
  };
}
