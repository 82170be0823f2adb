import type { ParsedEvent } from '../../events/parse-event.js';
import { pack, unpacker, type PackedValue } from '../../threads/packed.js';
import type { EventOrigin } from '../schema.js';
import type { NewDelivery } from './delivery-sql.js';

/** An event's fields in their packed order; the check below fails to compile when ParsedEvent gains one this misses. */
const EVENT_FIELDS = ['id', 'type', 'createdAt', 'createdAtIso', 'boxId', 'boxName', 'state', 'previousState', 'payload'] as const;
type Unpacked = Exclude<keyof ParsedEvent, (typeof EVENT_FIELDS)[number]>;
true satisfies [Unpacked] extends [never] ? true : Unpacked;

/** Deliveries as one buffer, for the storage thread: see `pack`. */
export function packDeliveries(deliveries: readonly NewDelivery[]): Uint8Array<ArrayBuffer> {
  const values: PackedValue[] = [];
  for (const { event, receivedAt, attempt, origin, traceparent, sinks } of deliveries) {
    for (const field of EVENT_FIELDS) values.push(event[field]);
    values.push(receivedAt, attempt, origin ?? null, traceparent ?? null, sinks.length, ...sinks);
  }
  return pack(values);
}

export function unpackDeliveries(packed: Uint8Array): NewDelivery[] {
  const values = unpacker(packed);
  const deliveries: NewDelivery[] = [];
  while (!values.done()) {
    const event = {} as Record<keyof ParsedEvent, PackedValue>;
    for (const field of EVENT_FIELDS) event[field] = values.next();
    const receivedAt = values.next() as number;
    const attempt = values.next() as number | null;
    const origin = (values.next() as EventOrigin | null) ?? undefined;
    const traceparent = (values.next() as string | null) ?? undefined;
    const sinks = Array.from({ length: values.next() as number }, () => values.next() as string);
    deliveries.push({ event: event as unknown as ParsedEvent, receivedAt, attempt, sinks, origin, traceparent });
  }
  return deliveries;
}
