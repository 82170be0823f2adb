import type { Metrics } from '../../metrics/metrics.js';
import type { StoredEvent } from '../../events/types.js';
import type { DeliveryWriter, NewDelivery, RecordResult } from './delivery-sql.js';

/**
 * Store once: the one entrance to the store for an event, whether a webhook brought it or a
 * reconciliation run found it. Dedup, box state and fan-out rows are one commit (the writer);
 * `events_total` counts each event the first time it is stored.
 */
export type AcceptEvent = (delivery: Omit<NewDelivery, 'sinks'>) => Promise<RecordResult>;

export interface AcceptEventDeps {
  writer: DeliveryWriter;
  /** The router: by type, then the hooks' filters on the event. */
  sinksFor(type: string, event: StoredEvent): string[];
  metrics: Pick<Metrics, 'events' | 'eventTypeLabel'>;
}

export function acceptEvent({ writer, sinksFor, metrics }: AcceptEventDeps): AcceptEvent {
  return async (delivery) => {
    const stored = await writer.record({ ...delivery, sinks: sinksFor(delivery.event.type, { payload: delivery.event.payload, origin: delivery.origin }) });
    if (!stored.duplicate) metrics.events.inc({ type: metrics.eventTypeLabel(delivery.event.type) });
    return stored;
  };
}
