import { randomBytes } from 'node:crypto';
import type { Clock } from '../clock.js';
import { DEFAULT_ACCOUNT } from '../config/default-account.js';
import { parseEvent } from '../events/parse-event.js';
import type { Logger } from '../log.js';
import type { StoredEvent } from '../events/types.js';
import { accountKeyed } from '../store/account-keys.js';
import type { DeliveryWriter } from '../store/write/delivery-sql.js';

/** What an operator must act on (contract section 5, "Operator events"). */
export type OperatorEventType =
  | 'boxrelay.sink.paused'
  | 'boxrelay.sink.resumed'
  | 'boxrelay.sink.degraded'
  | 'boxrelay.event.dead_lettered'
  | 'boxrelay.reconcile.failed';

export interface OperatorEvent {
  type: OperatorEventType;
  /** The CloudEvent `subject`: a sink name, or a box id. */
  subject?: string | undefined;
  data: Record<string, unknown>;
  /** The sink the event is about: it is never told of its own failures. */
  about?: string | undefined;
  /**
   * The account of the event it is about (contract section 21): it is stored and relayed as one of
   * that account's events. Absent: `default`, as for an event about a sink.
   */
  account?: string | undefined;
}

export interface OperatorEvents {
  /** Stores the event with its fan-out, like a received one; a storage failure is logged, not thrown. */
  announce(event: OperatorEvent): Promise<void>;
}

export interface OperatorEventsDeps {
  writer: DeliveryWriter;
  /** The sinks an operator event type goes to: NATS, and hooks that opted in with a `boxrelay.` pattern. */
  sinksFor(type: string, event: StoredEvent): string[];
  clock: Clock;
  logger: Logger;
}

export function createOperatorEvents({ writer, sinksFor, clock, logger }: OperatorEventsDeps): OperatorEvents {
  return {
    async announce({ type, subject, data, about, account = DEFAULT_ACCOUNT }) {
      const now = clock.now();
      const id = `evt_${randomBytes(16).toString('hex')}`;
      const payload = JSON.stringify({ id, type, createdAt: new Date(now).toISOString(), ...(subject === undefined ? {} : { subject }), data });
      try {
        const event = accountKeyed(parseEvent(Buffer.from(payload), id, { operator: true }), account);
        const sinks = sinksFor(type, { payload, origin: 'operator', account }).filter((sink) => sink !== about);
        await writer.record({ event, receivedAt: now, attempt: null, origin: 'operator', sinks });
      } catch (error) {
        logger.error({ err: error, type, subject }, 'could not store an operator event');
      }
    },
  };
}
