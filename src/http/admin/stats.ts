import type { Kysely } from 'kysely';
import { DAY_MS, type Clock } from '../../clock.js';
import { InvalidRequestError } from '../../errors.js';
import { requireSince } from '../../iso-time.js';
import type { Schema } from '../../store/schema.js';
import { readStats, statsWindow } from '../../store/state/stats.js';
import { methodNotAllowed } from '../send-error.js';
import { queryText } from './pagination.js';
import { z } from 'zod';
import { isoTime, okAnswer, queryParam, reply, type AdminOperation } from './operation.js';
import type { AdminRoutes } from './router.js';

const BUCKET_MS: Record<string, number> = { '1m': 60_000, '5m': 300_000, '1h': 3_600_000 };
export const MAX_BUCKETS = 500;

const bySink = z.record(z.string(), z.number().int());

export const statsOperation = {
  method: 'get',
  path: '/stats',
  summary: 'Deliveries accepted, and delivered and failed by sink, per time bucket.',
  query: {
    since: queryParam('The first bucket holds this ISO 8601 time (default: 24 hours ago).'),
    bucket: queryParam('The bucket size: 1m, 5m or 1h (default).', ['1m', '5m', '1h']),
  },
  answers: {
    200: okAnswer({
      buckets: z.array(
        z.strictObject({
          start: isoTime(),
          accepted: bySink.describe('Deliveries accepted, by event type.'),
          delivered: bySink.describe('By sink.'),
          failed: bySink.describe('Failed attempts, by sink.'),
        }),
      ),
    }),
  },
  errors: ['invalid_request'],
} as const satisfies AdminOperation;

export interface StatsRoutesDeps {
  kysely: Kysely<Schema>;
  clock: Clock;
  /** Stores the delivery counts this process holds, so the answer includes them. */
  flush(): Promise<void>;
}

/** `GET /admin/stats?since=<ISO>&bucket=<1m|5m|1h>` (contract section 15); `since` defaults to 24 h ago, `bucket` to 1h. */
export function statsRoutes({ kysely, clock, flush }: StatsRoutesDeps): AdminRoutes {
  return {
    operations: [statsOperation],
    mount(router) {
      router.get(statsOperation.path, async (req, res) => {
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
        reply(res, statsOperation, 200, { ok: true, buckets: await readStats(kysely, window) });
      });
      router.all('/stats', methodNotAllowed('GET'));
    },
  };
}
