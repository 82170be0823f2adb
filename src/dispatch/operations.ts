import type { Clock } from '../clock.js';
import { InvalidRequestError, NotFoundError } from '../errors.js';
import { requireSince } from '../iso-time.js';
import type { DeadLetter, Outbox, Replay } from '../store/outbox.js';

export interface OperationsDeps {
  outbox: Outbox;
  /** The configured sinks' names. */
  sinks: string[];
  /** The router (event patterns and hook filters) that replays go through. */
  sinksFor: Replay['sinksFor'];
  clock: Clock;
  /** Tells a dispatcher in this process that work is due (the CLI has none: servers poll). */
  wake?(): void;
}

/** Dead letters and replay, checked the same way for the admin API and the CLI. */
export interface Operations {
  list(options: { sink?: string | undefined; after?: number | undefined; limit: number }): Promise<DeadLetter[]>;
  /** Back to pending with a fresh attempt budget; refused for a sink that is no longer configured. */
  retry(id: number): Promise<void>;
  /** Every dead letter (of one sink) whose sink is configured. */
  retryAll(sink?: string): Promise<number>;
  discard(id: number): Promise<void>;
  /** Discards dead letters of any sink, configured or not (set-aside work included). */
  discardAll(sink?: string): Promise<number>;
  /** Queues the deliveries received since `since` (ISO 8601 with zone) again; returns how many rows. */
  replay(options: { since: string; sink?: string | undefined }): Promise<number>;
}

export function createOperations({ outbox, sinks, sinksFor, clock, wake = () => {} }: OperationsDeps): Operations {
  const configuredSink = (sink: string | undefined): string | undefined => {
    if (sink !== undefined && !sinks.includes(sink)) throw new InvalidRequestError(`sink ${JSON.stringify(sink)} is not configured`);
    return sink;
  };
  const requireDeadLetter = async (id: number): Promise<DeadLetter> => {
    const found = await outbox.findDeadLetter(wholeId(id));
    if (!found) throw new NotFoundError(`no dead letter ${id}`);
    return found;
  };

  return {
    list: (options: { sink?: string | undefined; after?: number | undefined; limit: number }) => outbox.listDeadLetters(options),

    /** Back to pending with a fresh attempt budget; refused for a sink that is no longer configured. */
    async retry(id: number): Promise<void> {
      const deadLetter = await requireDeadLetter(id);
      configuredSink(deadLetter.sink);
      await outbox.retryDeadLetters({ id, configured: sinks, now: clock.now() });
      wake();
    },

    /** Every dead letter (of one sink) whose sink is configured. */
    async retryAll(sink?: string): Promise<number> {
      const retried = await outbox.retryDeadLetters({ sink: configuredSink(sink), configured: sinks, now: clock.now() });
      if (retried > 0) wake();
      return retried;
    },

    async discard(id: number): Promise<void> {
      const discarded = await outbox.discardDeadLetters({ id: wholeId(id) });
      if (discarded === 0) throw new NotFoundError(`no dead letter ${id}`);
    },

    /** Discards dead letters of any sink, configured or not (set-aside work included). */
    discardAll: (sink?: string) => outbox.discardDeadLetters({ sink }),

    /** Queues the deliveries received since `since` (ISO 8601 with zone) again; returns how many rows. */
    async replay({ since, sink }: { since: string; sink?: string | undefined }): Promise<number> {
      const sinceMs = requireSince(since);
      const queued = await outbox.replay({ since: sinceMs, now: clock.now(), sinksFor, sink: configuredSink(sink) });
      if (queued > 0) wake();
      return queued;
    },
  };
}

/** An id that cannot name a row (NaN from an unreadable path, a fraction) is a malformed request, not a 404. */
function wholeId(id: number): number {
  if (!Number.isSafeInteger(id) || id < 0) throw new InvalidRequestError('a dead letter id is a whole number');
  return id;
}
