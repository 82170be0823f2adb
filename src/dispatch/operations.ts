import type { AuditTrail } from '../audit-trail.js';
import type { Clock } from '../clock.js';
import { InvalidRequestError, NotFoundError } from '../errors.js';
import { requireSince } from '../iso-time.js';
import { untrusted } from '../log.js';
import type { FanoutStore } from '../store/fanout-store.js';
import type { DeadLetter, Replay } from '../store/exceptions/rows.js';

export interface OperationsDeps {
  exceptions: FanoutStore['exceptions'];
  /** The configured sinks' names. */
  sinks: string[];
  /** The router (event patterns and hook filters), for a replay of deliveries stored before their routing was. */
  sinksFor: Replay['sinksFor'];
  clock: Clock;
  /** Each change is recorded with who asked for it (contract section 15). */
  trail: AuditTrail;
  /** Tells a dispatcher in this process that work is due (the CLI has none: servers poll). */
  wake?(): void;
}

/**
 * Dead letters and replay, checked the same way for the admin API and the CLI. `by` is who asks
 * (the admin client's address, or `cli`): each change is recorded in the audit trail with it.
 */
export interface Operations {
  list(options: { sink?: string | undefined; after?: number | undefined; limit: number }): Promise<DeadLetter[]>;
  /** Back to pending with a fresh attempt budget; refused for a sink that is no longer configured. */
  retry(id: number, by: string): Promise<void>;
  /** Every dead letter (of one sink) whose sink is configured. */
  retryAll(sink: string | undefined, by: string): Promise<number>;
  discard(id: number, by: string): Promise<void>;
  /** Discards dead letters of any sink, configured or not (set-aside work included). */
  discardAll(sink: string | undefined, by: string): Promise<number>;
  /** Sends one stored event to one configured sink again, whatever its status (contract section 16). */
  resend(eventId: string, sink: string, by: string): Promise<void>;
  /** Queues the deliveries received since `since` (ISO 8601 with zone) again; returns how many rows. */
  replay(options: { since: string; sink?: string | undefined }, by: string): Promise<number>;
}

/** Only the parameters given: `{"sink": undefined}` would read as a parameter that was sent. */
const given = (detail: Record<string, unknown>) => Object.fromEntries(Object.entries(detail).filter(([, value]) => value !== undefined));

export function createOperations({ exceptions, sinks, sinksFor, clock, trail, wake = () => {} }: OperationsDeps): Operations {
  const configuredSink = (sink: string | undefined): string | undefined => {
    if (sink !== undefined && !sinks.includes(sink)) throw new InvalidRequestError(`sink ${JSON.stringify(sink)} is not configured`);
    return sink;
  };
  const requireDeadLetter = async (id: number): Promise<DeadLetter> => {
    const found = await exceptions.findDeadLetter(wholeId(id));
    if (!found) throw new NotFoundError(`no dead letter ${id}`);
    return found;
  };

  return {
    list: (options: { sink?: string | undefined; after?: number | undefined; limit: number }) => exceptions.listDeadLetters(options),

    /** Back to pending with a fresh attempt budget; refused for a sink that is no longer configured. */
    async retry(id: number, by: string): Promise<void> {
      const deadLetter = await requireDeadLetter(id);
      configuredSink(deadLetter.sink);
      await trail.record({ action: 'retry', target: String(id), by, detail: { id }, eventId: deadLetter.eventId }, (audit) =>
        exceptions.retryDeadLetters({ id, configured: sinks, now: audit.at }, audit),
      );
      wake();
    },

    async retryAll(sink: string | undefined, by: string): Promise<number> {
      configuredSink(sink);
      const retried = await trail.record({ action: 'retry_all', target: sink ?? null, by, detail: given({ sink }) }, (audit) =>
        exceptions.retryDeadLetters({ sink, configured: sinks, now: audit.at }, audit),
      );
      if (retried > 0) wake();
      return retried;
    },

    async discard(id: number, by: string): Promise<void> {
      const deadLetter = await requireDeadLetter(id);
      await trail.record({ action: 'discard', target: String(id), by, detail: { id }, eventId: deadLetter.eventId }, async (audit) => {
        if ((await exceptions.discardDeadLetters({ id, now: audit.at }, audit)) === 0) throw new NotFoundError(`no dead letter ${id}`);
      });
    },

    /** Discards dead letters of any sink, configured or not (set-aside work included). */
    discardAll: (sink: string | undefined, by: string) =>
      trail.record({ action: 'discard', target: sink ?? null, by, detail: given({ all: true, sink }) }, (audit) =>
        exceptions.discardDeadLetters({ sink, now: audit.at }, audit),
      ),

    async resend(eventId: string, sink: string, by: string): Promise<void> {
      if (!sinks.includes(sink)) throw new NotFoundError(`no sink ${JSON.stringify(untrusted(sink))} is configured`);
      await trail.record({ action: 'resend', target: eventId, by, detail: { sink }, eventId }, async (audit) => {
        if ((await exceptions.resend({ eventId, sink, now: audit.at }, audit)) === 0) throw new NotFoundError('no such event');
      });
      wake();
    },

    async replay({ since, sink }: { since: string; sink?: string | undefined }, by: string): Promise<number> {
      const sinceMs = requireSince(since);
      configuredSink(sink);
      const queued = await trail.record({ action: 'replay', target: sink ?? null, by, detail: given({ since, sink }) }, (audit) =>
        exceptions.replay({ since: sinceMs, now: audit.at, sinksFor, configured: sinks, sink }, audit),
      );
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
