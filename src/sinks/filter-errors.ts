import type { Clock } from '../clock.js';
import type { Logger } from '../log.js';

/** One warning per hook per minute at most: a filter that fails on every event must not flood the log. */
const LOG_EVERY_MS = 60_000;

export interface FilterErrorsDeps {
  clock: Clock;
  logger: Logger;
  /** `boxrelay_filter_errors_total{sink}`; absent in commands that keep no metrics. */
  count?: (sink: string) => void;
}

/** Reports a filter's evaluation errors: each counted, logged at warn at most once a minute per hook. */
export function filterErrorReporter({ clock, logger, count }: FilterErrorsDeps): (sink: string, error: Error) => void {
  const loggedAt = new Map<string, number>();
  const unlogged = new Map<string, number>();
  return (sink, error) => {
    count?.(sink);
    const now = clock.now();
    const last = loggedAt.get(sink);
    if (last !== undefined && now - last < LOG_EVERY_MS) {
      unlogged.set(sink, (unlogged.get(sink) ?? 0) + 1);
      return;
    }
    loggedAt.set(sink, now);
    logger.warn(
      { sink, error: error.message, errorsNotLogged: unlogged.get(sink) ?? 0 },
      'a hook filter failed on an event: counted as false, the hook does not get the event',
    );
    unlogged.delete(sink);
  };
}
