import type { Kysely } from 'kysely';
import { DAY_MS, type Clock } from '../../clock.js';
import { InvalidRequestError } from '../../errors.js';
import { requireSince } from '../../iso-time.js';
import type { Schema } from '../../store/schema.js';
import { readStats, statsWindow } from '../../store/state/stats.js';
import { methodNotAllowed } from '../send-error.js';
import { queryText } from './pagination.js';
import type { AdminRoutes } from './router.js';

const BUCKET_MS: Record<string, number> = { '1m': 60_000, '5m': 300_000, '1h': 3_600_000 };
export const MAX_BUCKETS = 500;

export interface StatsRoutesDeps {
  kysely: Kysely<Schema>;
  clock: Clock;
  /** Stores the delivery counts this process holds, so the answer includes them. */
  flush(): Promise<void>;
}

/** `GET /admin/stats?since=<ISO>&bucket=<1m|5m|1h>` (contract section 15); `since` defaults to 24 h ago, `bucket` to 1h. */
export function statsRoutes({ kysely, clock, flush }: StatsRoutesDeps): AdminRoutes {
  return {
    mount(router) {
      router.get('/stats', async (req, res) => {
        const now = clock.now();
        const sinceText = queryText(req, 'since');
        const since = sinceText === undefined ? now - DAY_MS : requireSince(sinceText);
        const bucket = queryText(req, 'bucket') ?? '1h';
        const bucketMs = BUCKET_MS[bucket];
        if (bucketMs === undefined) throw new InvalidRequestError('bucket must be 1m, 5m or 1h');
        const window = statsWindow(since, now, bucketMs);
        if (window.count > MAX_BUCKETS) {
          throw new InvalidRequestError(`at most ${MAX_BUCKETS} buckets: choose a later since or a larger bucket`);
        }
        await flush();
        res.json({ ok: true, buckets: await readStats(kysely, window) });
      });
      router.all('/stats', methodNotAllowed('GET'));
    },
  };
}
