import type { EventRow } from '../store/exceptions/rows.js';
import type { OutboxStatus } from '../store/schema.js';

export type DeliveryStatus = 'pending' | 'delivered' | 'dead_lettered' | 'discarded' | 'set_aside';

export interface EventDelivery {
  sink: string;
  status: DeliveryStatus;
  attempts: number;
  lastError: string | null;
  /** When the row last changed: for a delivered row, when the sink acknowledged it. */
  updatedAt: string;
}

const STATUS: Record<OutboxStatus, DeliveryStatus> = {
  pending: 'pending',
  delivered: 'delivered',
  dead: 'dead_lettered',
  discarded: 'discarded',
  set_aside: 'set_aside',
};

/**
 * Where one event stands with each sink it was routed to (contract section 6): its outbox rows,
 * kept with their outcome, name exactly those sinks. Of several rows for one sink (a replay), the
 * newest counts.
 */
export function eventDeliveries(rows: EventRow[]): EventDelivery[] {
  const newest = new Map<string, EventRow>();
  for (const row of rows) newest.set(row.sink, row);
  return [...newest.values()].map((row) => ({
    sink: row.sink,
    status: STATUS[row.status],
    attempts: row.attempts,
    lastError: row.lastError,
    updatedAt: new Date(row.updatedAt).toISOString(),
  }));
}
