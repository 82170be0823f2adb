import type { Clock } from '../clock.js';
import { throttledLog, type Logger } from '../log.js';

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
  const warn = throttledLog(
    ({ sink, error }: { sink: string; error: Error }, unlogged) =>
      logger.warn({ sink, error: error.message, errorsNotLogged: unlogged }, 'a hook filter failed on an event: counted as false, the hook does not get the event'),
    { keyOf: ({ sink }) => sink, every: { clock, ms: LOG_EVERY_MS } },
  );
  return (sink, error) => {
    count?.(sink);
    warn({ sink, error });
  };
}
