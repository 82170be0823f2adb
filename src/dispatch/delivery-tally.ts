import type { Clock } from '../clock.js';
import type { Logger } from '../log.js';
import type { SinkOutcome } from '../metrics/metrics.js';
import { MINUTE_MS, type SinkMinute } from '../store/state/stats.js';
import type { DispatchMetrics } from './dispatcher.js';

export interface DeliveryTallyDeps {
  /** Adds a batch of counts to the stored per-minute counters (one statement). */
  store(counts: SinkMinute[]): Promise<void>;
  clock: Clock;
  logger: Logger;
  /** How long counts wait to be stored together. */
  flushMs?: number;
}

export interface DeliveryTally {
  /** The dispatcher's metrics, whose delivery counts also go to the tally. */
  metrics(inner: DispatchMetrics): DispatchMetrics;
  /** Stores what was counted so far (before the stats are read, and at shutdown). */
  flush(): Promise<void>;
}

/**
 * The per-minute counts behind `GET /admin/stats`'s `delivered` and `failed`, taken from the very
 * counts of `sink_deliveries_total` (delivered; retried and dead_lettered are failed attempts) and
 * stored in one upsert per second at most, not one write per event. With the fan-out in its worker
 * thread they arrive in its metric reports (every 100 ms) and count in the minute they arrive.
 */
export function createDeliveryTally({ store, clock, logger, flushMs = 1000 }: DeliveryTallyDeps): DeliveryTally {
  let counts = new Map<string, SinkMinute>();
  let timer: NodeJS.Timeout | undefined;
  let flushing: Promise<void> = Promise.resolve();

  const add = (entry: SinkMinute) => {
    const key = `${entry.minute}\n${entry.sink}`;
    const known = counts.get(key);
    if (known) {
      known.delivered += entry.delivered;
      known.failed += entry.failed;
    } else counts.set(key, { ...entry });
  };

  const flush = (): Promise<void> => {
    clearTimeout(timer);
    timer = undefined;
    const batch = [...counts.values()];
    counts = new Map();
    if (batch.length === 0) return flushing;
    flushing = flushing
      .then(() => store(batch))
      .catch((error: unknown) => {
        // Kept for the next flush: a failed write loses no count.
        batch.forEach(add);
        logger.error({ err: error, part: 'stats' }, 'could not store the delivery counts; trying again with the next ones');
      });
    return flushing;
  };

  const count = (sink: string, outcome: SinkOutcome, n: number) => {
    if (n <= 0) return;
    const minute = Math.floor(clock.now() / MINUTE_MS) * MINUTE_MS;
    // A skipped event (a transform that sends nothing) is neither delivered to the sink nor failed.
    if (outcome === 'skipped') return;
    add({ sink, minute, delivered: outcome === 'delivered' ? n : 0, failed: outcome === 'delivered' ? 0 : n });
    timer ??= setTimeout(() => void flush(), flushMs).unref();
  };

  return {
    metrics: (inner) => ({
      ...inner,
      sinkDeliveries: {
        inc(labels, n = 1) {
          inner.sinkDeliveries.inc(labels, n);
          count(labels.sink, labels.outcome, n);
        },
      },
    }),
    flush,
  };
}
