import type { Clock } from '../clock.js';
import { throttledLog, type Logger } from '../log.js';

/** One warning per hook per minute at most: a filter or transform that fails on every event must not flood the log. */
const LOG_EVERY_MS = 60_000;

export interface FilterErrorsDeps {
  clock: Clock;
  logger: Logger;
  /** `boxrelay_filter_errors_total{sink}` (or `transform_errors_total`); absent in commands that keep no metrics. */
  count?: (sink: string) => void;
}

/** Reports an expression's evaluation errors: each counted, logged at warn at most once a minute per hook. */
function hookErrorReporter({ clock, logger, count }: FilterErrorsDeps, message: string): (sink: string, error: Error) => void {
  const warn = throttledLog(
    ({ sink, error }: { sink: string; error: Error }, unlogged) => logger.warn({ sink, error: error.message, errorsNotLogged: unlogged }, message),
    { keyOf: ({ sink }) => sink, every: { clock, ms: LOG_EVERY_MS } },
  );
  return (sink, error) => {
    count?.(sink);
    warn({ sink, error });
  };
}

/** A hook filter's evaluation errors (contract section 14). */
export const filterErrorReporter = (deps: FilterErrorsDeps) =>
  hookErrorReporter(deps, 'a hook filter failed on an event: counted as false, the hook does not get the event');

/** A hook transform's evaluation errors (contract section 17). */
export const transformErrorReporter = (deps: FilterErrorsDeps) =>
  hookErrorReporter(deps, 'a hook transform failed on an event: a dead letter for that hook (transform_failed)');
