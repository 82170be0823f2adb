import { z } from 'zod';
import { DeliveryIdMismatchError, InvalidEventError } from '../errors.js';

/** The upstream delivery payload (sandbox-api-v1 "Delivery payload"); unknown fields are kept. */
const eventSchema = z.looseObject({
  id: z.string().min(1),
  type: z.string().min(1),
  createdAt: z.iso.datetime({ offset: true }),
  data: z.record(z.string(), z.unknown()),
});

/**
 * The receiver's limits (contract section 2): past them an event could not be published (NATS
 * subjects), listed (deep JSON overflows the stack of `JSON.stringify`) or labelled sanely.
 */
export const EVENT_LIMITS = { idChars: 256, boxIdChars: 256, typeChars: 128, depth: 64 } as const;

// Fatal: replacing invalid bytes with U+FFFD would make different raw box ids one box. The BOM is
// kept, so the payload stays the exact bytes (and JSON.parse refuses it, as it always did).
const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

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
  const payload = decodeUtf8(body);
  checkDepth(payload, EVENT_LIMITS.depth);
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
  checkLength('id', event.id, EVENT_LIMITS.idChars);
  checkLength('type', event.type, EVENT_LIMITS.typeChars);
  const box = boxSchema.safeParse(event.data.box);
  if (event.type.startsWith('box.') && !box.success) {
    throw new InvalidEventError(`${event.type} requires a non-empty string data.box.id`);
  }
  if (box.success) checkLength('data.box.id', box.data.id, EVENT_LIMITS.boxIdChars);
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

function decodeUtf8(body: Buffer): string {
  try {
    return utf8.decode(body);
  } catch {
    throw new InvalidEventError('body is not valid UTF-8');
  }
}

/** Characters are code points (as in contract section 4); the type is named, never echoed. */
function checkLength(field: string, value: string, limit: number): void {
  // Code points are at most as many as UTF-16 units and at least half as many: count only between.
  if (value.length <= limit) return;
  if (value.length > 2 * limit || [...value].length > limit) {
    throw new InvalidEventError(`${field} is longer than ${limit} characters`);
  }
}

/**
 * Refuses nesting deeper than `limit` before JSON.parse, in one pass without recursion, so a body
 * nested thousands of levels deep costs a scan and nothing else.
 */
export function checkDepth(text: string, limit: number): void {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c /* backslash */) i++;
      else if (c === 0x22 /* " */) inString = false;
    } else if (c === 0x22) {
      inString = true;
    } else if (c === 0x7b /* { */ || c === 0x5b /* [ */) {
      if (++depth > limit) throw new InvalidEventError(`JSON nesting is deeper than ${limit} levels`);
    } else if (c === 0x7d /* } */ || c === 0x5d /* ] */) {
      depth--;
    }
  }
}
