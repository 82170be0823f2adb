import type { IncomingMessage } from 'node:http';
import { DuplicateHeaderError, MalformedTimestampError, MissingHeaderError, TimestampOutOfWindowError } from '../errors.js';

export interface DeliveryHeaders {
  deliveryId: string;
  /** Exactly as sent: the signature covers these characters. */
  timestamp: string;
  signature: string;
  /** `X-Service-Attempt` when it is a positive integer; informational only. */
  attempt: number | null;
}

// Field, header as named in refusals, and as node keys it.
const REQUIRED = [
  ['deliveryId', 'X-Service-Delivery', 'x-service-delivery'],
  ['timestamp', 'X-Service-Timestamp', 'x-service-timestamp'],
  ['signature', 'X-Service-Signature', 'x-service-signature'],
] as const;

/**
 * The delivery headers, one header line at a time (`headersDistinct`: node would join repeated lines
 * with ", "). Missing is checked before repeated, as in the contract's table; a repeated signature
 * header adds its items, a repeated delivery id or timestamp is refused.
 */
export function readDeliveryHeaders(headers: IncomingMessage['headersDistinct']): DeliveryHeaders {
  const found: Partial<Record<(typeof REQUIRED)[number][0], string>> = {};
  for (const [field, name, key] of REQUIRED) {
    const lines = headers[key];
    const value = lines === undefined ? '' : lines.length === 1 ? (lines[0] as string) : lines.join(' ');
    if (value.trim() === '') throw new MissingHeaderError(name);
    found[field] = value;
  }
  for (const [, name, key] of REQUIRED.slice(0, 2)) {
    if ((headers[key]?.length ?? 0) > 1) throw new DuplicateHeaderError(name);
  }
  const attempt = headers['x-service-attempt'];
  const delivery = found as DeliveryHeaders;
  delivery.attempt = attempt?.length === 1 && /^[1-9][0-9]{0,8}$/.test(attempt[0] as string) ? Number(attempt[0]) : null;
  return delivery;
}

/** The timestamp is ASCII digits only (no sign, point or exponent); exactly the tolerance is allowed. */
export function checkTimestamp(timestamp: string, nowMs: number, toleranceSeconds: number): void {
  if (!/^[0-9]+$/.test(timestamp)) throw new MalformedTimestampError();
  const nowSeconds = Math.floor(nowMs / 1000);
  if (Math.abs(nowSeconds - Number(timestamp)) > toleranceSeconds) {
    throw new TimestampOutOfWindowError(toleranceSeconds);
  }
}
