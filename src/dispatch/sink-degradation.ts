import type { Kysely } from 'kysely';
import type { Clock } from '../clock.js';
import type { Logger } from '../log.js';
import { attemptShares, type AttemptShare } from '../store/attempts/failure-shares.js';
import type { DegradedMarks } from '../store/state/degraded-marks.js';
import type { Schema } from '../store/schema.js';
import type { OperatorEvents } from './operator-events.js';

/** The failure thresholds announced, in percent (contract section 22, "Failures graded"). */
export const DEGRADED_THRESHOLDS = [50, 70, 90] as const;
/** The share is of the attempts in the minutes that start within this window. */
export const FAILURE_WINDOW_MS = 5 * 60_000;
/** Fewer attempts than this in the window say too little: no announcement, no re-arming, a ratio of 0. */
export const FAILURE_MIN_ATTEMPTS = 10;
/** A share under this re-arms every threshold of the sink. */
const REARM_BELOW = 0.25;
/** How often each replica checks: the window is minutes long, so an announcement is late by seconds at most. */
export const DEGRADATION_CHECK_MS = 15_000;

/** The share of failed attempts, or undefined when too few attempts were made to judge it. */
function failureRate(share: AttemptShare | undefined): number | undefined {
  return share === undefined || share.attempts < FAILURE_MIN_ATTEMPTS ? undefined : share.failed / share.attempts;
}

/** The highest threshold the rate is past (strictly), or 0. */
const reached = (rate: number): number => DEGRADED_THRESHOLDS.filter((threshold) => rate > threshold / 100).at(-1) ?? 0;

export interface SinkDegradation {
  /** Each configured sink's share of failed attempts over the window (0 under the minimum of attempts): `boxrelay_sink_failure_ratio`. */
  ratios(): Promise<Record<string, number>>;
  /**
   * Announces `boxrelay.sink.degraded` for each sink whose share rose past a threshold not announced
   * since it last fell under 25 % (a share past several at once: the highest), and re-arms the sinks
   * whose share fell under 25 %.
   */
  check(): Promise<void>;
}

export interface SinkDegradationDeps {
  kysely: Kysely<Schema>;
  marks: DegradedMarks;
  /** The configured sinks' names. */
  sinks: string[];
  operatorEvents: OperatorEvents;
  clock: Clock;
  /** Writes the attempts this thread has queued, so the share counts them. */
  flush(): Promise<void>;
  logger: Logger;
}

/**
 * Failures graded, from the per-minute sums of every replica's attempts. It runs on a schedule
 * (DEGRADATION_CHECK_MS) rather than as attempts are recorded: the share is over minutes, so a check
 * every few seconds loses nothing, and it costs two reads per check whatever the traffic, nothing per
 * delivery. Every replica checks; the marks' compare-and-set makes each announcement once.
 */
export function createSinkDegradation({ kysely, marks, sinks, operatorEvents, clock, flush, logger }: SinkDegradationDeps): SinkDegradation {
  const log = logger.child({ part: 'dispatch' });
  const shares = () => attemptShares(kysely, { sinks, since: clock.now() - FAILURE_WINDOW_MS });
  return {
    async ratios() {
      const bySink = await shares();
      return Object.fromEntries(sinks.map((sink) => [sink, failureRate(bySink.get(sink)) ?? 0]));
    },

    async check() {
      await flush();
      const [bySink, marked] = await Promise.all([shares(), marks.read(sinks)]);
      for (const sink of sinks) {
        const share = bySink.get(sink);
        const rate = failureRate(share);
        if (share === undefined || rate === undefined) continue;
        const announced = marked.get(sink) ?? 0;
        const threshold = reached(rate);
        if (threshold > announced) {
          if (!(await marks.move(sink, announced, threshold))) continue;
          log.warn({ sink, threshold, failureRate: rate, attempts: share.attempts }, 'the share of failed attempts of the sink rose past a threshold');
          await operatorEvents.announce({ type: 'boxrelay.sink.degraded', subject: sink, about: sink, data: { sink, threshold, failureRate: rate, attempts: share.attempts } });
        } else if (announced > 0 && rate < REARM_BELOW && (await marks.move(sink, announced, 0))) {
          log.info({ sink, failureRate: rate, attempts: share.attempts }, 'the share of failed attempts of the sink fell under 25 %: its thresholds are announced again when passed');
        }
      }
    },
  };
}
