import type { EventRow } from '../store/outbox.js';

export type DeliveryStatus = 'pending' | 'delivered' | 'dead_lettered' | 'set_aside';

export interface EventDelivery {
  sink: string;
  status: DeliveryStatus;
  /** Null when delivered: a delivered row is deleted, and its attempts with it. */
  attempts: number | null;
  lastError: string | null;
  updatedAt: string | null;
}

/**
 * Where one event stands with each sink (contract section 6). The outbox deletes a row once
 * delivered, so a sink the event is routed to with no row left has delivered it; a row of a sink
 * no longer configured is set aside. Of several rows for one sink (a replay), the newest counts.
 */
export function eventDeliveries({ routedTo, configured, rows }: { routedTo: string[]; configured: string[]; rows: EventRow[] }): EventDelivery[] {
  const newest = new Map<string, EventRow>();
  for (const row of rows) newest.set(row.sink, row);
  const sinks = [...new Set([...routedTo, ...newest.keys()])];
  return sinks.map((sink) => {
    const row = newest.get(sink);
    if (!row) return { sink, status: 'delivered', attempts: null, lastError: null, updatedAt: null };
    const status: DeliveryStatus = !configured.includes(sink) ? 'set_aside' : row.status === 'dead' ? 'dead_lettered' : 'pending';
    return { sink, status, attempts: row.attempts, lastError: row.lastError, updatedAt: new Date(row.updatedAt).toISOString() };
  });
}
