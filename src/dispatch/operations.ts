import type { Clock } from '../clock.js';
import { InvalidRequestError, NotFoundError } from '../errors.js';
import type { DeadLetter, Outbox } from '../store/outbox.js';

export interface OperationsDeps {
  outbox: Outbox;
  /** The configured sinks' names. */
  sinks: string[];
  /** The configured sinks an event type fans out to. */
  sinksFor(type: string): string[];
  clock: Clock;
  /** Tells a dispatcher in this process that work is due (the CLI has none: servers poll). */
  wake?(): void;
}

export type Operations = ReturnType<typeof createOperations>;

/** Dead letters and replay, checked the same way for the admin API and the CLI. */
export function createOperations({ outbox, sinks, sinksFor, clock, wake = () => {} }: OperationsDeps) {
  const configuredSink = (sink: string | undefined): string | undefined => {
    if (sink !== undefined && !sinks.includes(sink)) throw new InvalidRequestError(`sink ${JSON.stringify(sink)} is not configured`);
    return sink;
  };
  const requireDeadLetter = async (id: number): Promise<DeadLetter> => {
    const found = Number.isSafeInteger(id) ? await outbox.findDeadLetter(id) : undefined;
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
      const discarded = Number.isSafeInteger(id) ? await outbox.discardDeadLetters({ id }) : 0;
      if (discarded === 0) throw new NotFoundError(`no dead letter ${id}`);
    },

    /** Discards dead letters of any sink, configured or not (set-aside work included). */
    discardAll: (sink?: string) => outbox.discardDeadLetters({ sink }),

    /** Queues the deliveries received since `since` (ISO 8601 with zone) again; returns how many rows. */
    async replay({ since, sink }: { since: string; sink?: string | undefined }): Promise<number> {
      const sinceMs = parseInstant(since);
      const queued = await outbox.replay({ since: sinceMs, now: clock.now(), sinksFor, sink: configuredSink(sink) });
      if (queued > 0) wake();
      return queued;
    },
  };
}

const ISO_INSTANT = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})$/;

function parseInstant(text: string): number {
  const ms = ISO_INSTANT.test(text) ? Date.parse(text) : Number.NaN;
  if (Number.isNaN(ms)) throw new InvalidRequestError('since must be an ISO 8601 time with a zone, e.g. 2026-11-21T10:00:00Z');
  return ms;
}
