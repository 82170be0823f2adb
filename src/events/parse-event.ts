import { DeliveryIdMismatchError, InvalidEventError } from '../errors.js';
import { parseIsoWithZone } from '../iso-time.js';
import { isRecord } from '../json.js';

/**
 * The receiver's limits (contract section 2): past them an event could not be published (NATS
 * subjects), listed (deep JSON overflows the stack of `JSON.stringify`) or labelled sanely.
 */
export const EVENT_LIMITS = { idChars: 256, boxIdChars: 256, typeChars: 128, depth: 64 } as const;

// Fatal: replacing invalid bytes with U+FFFD would make different raw box ids one box. The BOM is
// kept, so the payload stays the exact bytes (and JSON.parse refuses it, as it always did).
const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

type JsonObject = Record<string, unknown>;

const isFilled = (value: unknown): value is string => typeof value === 'string' && value.length > 0;
const isIsoTime = (value: unknown): value is string => typeof value === 'string' && parseIsoWithZone(value) !== undefined;
/**
 * A copy kept beside the payload for reading (a box's name and states). PostgreSQL's text holds no
 * U+0000, so both engines keep U+FFFD in its place; the payload, relayed as received, keeps it.
 */
export const displayText = (value: string): string => value.replaceAll('\0', '\uFFFD');
const displayTextOrNull = (value: unknown): string | null => (typeof value === 'string' ? displayText(value) : null);

/**
 * The upstream delivery payload (sandbox-api-v1 "Delivery payload"): checked by hand rather than by a
 * schema, which would copy every field of the object on each delivery.
 */
export function isDeliveryPayload(json: unknown): json is { id: string; type: string; createdAt: string; data: JsonObject } {
  return isRecord(json) && isFilled(json.id) && isFilled(json.type) && isRecord(json.data) && isIsoTime(json.createdAt);
}

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

/** Types of the relay's own operator events (contract sections 2 and 5): never taken from outside. */
export const OPERATOR_EVENT_PREFIX = 'boxrelay.';

/**
 * Parses a verified body; the shape rules are those of contract section 2. A `boxrelay.` type is
 * refused unless the relay itself wrote the event (`operator`): the type alone makes no event the relay's.
 */
export function parseEvent(body: Buffer, deliveryId: string, { operator = false }: { operator?: boolean } = {}): ParsedEvent {
  const payload = decodeUtf8(body);
  checkDepth(payload, EVENT_LIMITS.depth);
  let json: unknown;
  try {
    json = JSON.parse(payload);
  } catch {
    throw new InvalidEventError('body is not JSON');
  }
  if (!isDeliveryPayload(json)) {
    throw new InvalidEventError('body must be a JSON object with string id, type, createdAt (ISO 8601) and object data');
  }
  const event = json;
  checkLength('id', event.id, EVENT_LIMITS.idChars);
  checkLength('type', event.type, EVENT_LIMITS.typeChars);
  checkNoNul('type', event.type);
  if (!operator && event.type.startsWith(OPERATOR_EVENT_PREFIX)) {
    throw new InvalidEventError(`${OPERATOR_EVENT_PREFIX} types name the relay's own operator events`);
  }
  // Only the id is required (contract section 2); a missing or odd name must not cost the event.
  const box = isRecord(event.data.box) && isFilled(event.data.box.id) ? event.data.box : undefined;
  if (event.type.startsWith('box.') && !box) {
    throw new InvalidEventError(`${event.type} requires a non-empty string data.box.id`);
  }
  if (box) {
    checkLength('data.box.id', box.id as string, EVENT_LIMITS.boxIdChars);
    checkNoNul('data.box.id', box.id as string);
  }
  if (event.id !== deliveryId) throw new DeliveryIdMismatchError();
  return {
    id: event.id,
    type: event.type,
    createdAt: event.createdAt,
    createdAtIso: new Date(event.createdAt).toISOString(),
    boxId: box ? (box.id as string) : null,
    boxName: box ? displayTextOrNull(box.name) : null,
    state: displayTextOrNull(event.data.state),
    previousState: displayTextOrNull(event.data.previousState),
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
 * A key the relay stores, routes and dedupes by cannot hold U+0000: PostgreSQL's text refuses it (a
 * delivery would answer 503 until the upstream gave up) and no header or subject can carry it. Refused
 * on both engines alike, so a SQLite file always copies to PostgreSQL. (The id needs no check: it
 * equals `X-Service-Delivery`, and a header holds no NUL.)
 */
function checkNoNul(field: string, value: string): void {
  if (value.includes('\0')) throw new InvalidEventError(`${field} holds U+0000`);
}

/**
 * Refuses nesting deeper than `limit` before JSON.parse, in one pass without recursion, so a body
 * nested thousands of levels deep costs a scan and nothing else. Strings are jumped over with
 * indexOf (most of a payload is string content, and brackets inside strings do not count).
 */
export function checkDepth(text: string, limit: number): void {
  let depth = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22 /* " */) {
      i = closingQuote(text, i);
      if (i < 0) return; // unterminated: JSON.parse refuses it
    } else if (c === 0x7b /* { */ || c === 0x5b /* [ */) {
      if (++depth > limit) throw new InvalidEventError(`JSON nesting is deeper than ${limit} levels`);
    } else if (c === 0x7d /* } */ || c === 0x5d /* ] */) {
      depth--;
    }
  }
}

/** The quote that closes the string opened at `open`: the first not escaped by an odd run of backslashes; -1 if none. */
function closingQuote(text: string, open: number): number {
  let at = open;
  for (;;) {
    at = text.indexOf('"', at + 1);
    if (at < 0) return -1;
    let backslashes = 0;
    while (text.charCodeAt(at - 1 - backslashes) === 0x5c /* backslash */) backslashes++;
    if (backslashes % 2 === 0) return at;
  }
}
