import { z } from 'zod';
import { DeliveryIdMismatchError, InvalidEventError } from '../errors.js';

/** The upstream delivery payload (sandbox-api-v1 "Delivery payload"); unknown fields are kept. */
const eventSchema = z.looseObject({
  id: z.string().min(1),
  type: z.string().min(1),
  createdAt: z.iso.datetime({ offset: true }),
  data: z.record(z.string(), z.unknown()),
});

// Only the id is required (contract section 2); a missing or odd name must not cost the event.
const boxSchema = z.looseObject({ id: z.string().min(1) });

export interface ParsedEvent {
  id: string;
  type: string;
  /** As the upstream wrote it; the CloudEvent `time`. */
  createdAt: string;
  /** Normalized to `toISOString()` so stored times compare as strings. */
  createdAtIso: string;
  boxId: string | null;
  boxName: string | null;
  state: string | null;
  previousState: string | null;
  /** The body exactly as received (UTF-8), stored and relayed without re-serialization. */
  payload: string;
}

/** Parses a verified body; the shape rules are those of contract section 2. */
export function parseEvent(body: Buffer, deliveryId: string): ParsedEvent {
  const payload = body.toString('utf8');
  let json: unknown;
  try {
    json = JSON.parse(payload);
  } catch {
    throw new InvalidEventError('body is not JSON');
  }
  const parsed = eventSchema.safeParse(json);
  if (!parsed.success) {
    throw new InvalidEventError('body must be a JSON object with string id, type, createdAt (ISO 8601) and object data');
  }
  const event = parsed.data;
  const box = boxSchema.safeParse(event.data.box);
  if (event.type.startsWith('box.') && !box.success) {
    throw new InvalidEventError(`${event.type} requires a non-empty string data.box.id`);
  }
  if (event.id !== deliveryId) throw new DeliveryIdMismatchError();
  return {
    id: event.id,
    type: event.type,
    createdAt: event.createdAt,
    createdAtIso: new Date(event.createdAt).toISOString(),
    boxId: box.success ? box.data.id : null,
    boxName: box.success && typeof box.data.name === 'string' ? box.data.name : null,
    state: typeof event.data.state === 'string' ? event.data.state : null,
    previousState: typeof event.data.previousState === 'string' ? event.data.previousState : null,
    payload,
  };
}
