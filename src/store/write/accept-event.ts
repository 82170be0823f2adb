import { DEFAULT_ACCOUNT } from '../../config/default-account.js';
import type { Metrics } from '../../metrics/metrics.js';
import type { StoredEvent } from '../../events/types.js';
import { accountKeyed } from '../account-keys.js';
import type { DeliveryWriter, NewDelivery, RecordResult } from './delivery-sql.js';

/**
 * Store once: the one entrance to the store for an event, whether a webhook brought it or a
 * reconciliation run found it. Dedup, box state and fan-out rows are one commit (the writer);
 * `events_total` counts each event the first time it is stored.
 */
export type AcceptEvent = (delivery: Omit<NewDelivery, 'sinks'> & { /** Absent: `default`. */ account?: string }) => Promise<RecordResult>;

export interface AcceptEventDeps {
  writer: DeliveryWriter;
  /** The router: by type, then the hooks' filters on the event. */
  sinksFor(type: string, event: StoredEvent): string[];
  metrics: Pick<Metrics, 'events' | 'eventTypeLabel'>;
}

export function acceptEvent({ writer, sinksFor, metrics }: AcceptEventDeps): AcceptEvent {
  return async ({ account = DEFAULT_ACCOUNT, ...delivery }) => {
    const sinks = sinksFor(delivery.event.type, { payload: delivery.event.payload, origin: delivery.origin, account });
    const stored = await writer.record({ ...delivery, event: accountKeyed(delivery.event, account), sinks });
    if (!stored.duplicate) metrics.events.inc({ account, type: metrics.eventTypeLabel(delivery.event.type) });
    return stored;
  };
}
