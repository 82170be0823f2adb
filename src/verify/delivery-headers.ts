import type { IncomingHttpHeaders } from 'node:http';
import { MalformedTimestampError, MissingHeaderError, TimestampOutOfWindowError } from '../errors.js';

export interface DeliveryHeaders {
  deliveryId: string;
  /** Exactly as sent: the signature covers these characters. */
  timestamp: string;
  signature: string;
  /** `X-Service-Attempt` when it is a positive integer; informational only. */
  attempt: number | null;
}

const REQUIRED = [
  ['deliveryId', 'X-Service-Delivery'],
  ['timestamp', 'X-Service-Timestamp'],
  ['signature', 'X-Service-Signature'],
] as const;

export function readDeliveryHeaders(headers: IncomingHttpHeaders): DeliveryHeaders {
  const found: Partial<Record<(typeof REQUIRED)[number][0], string>> = {};
  for (const [field, name] of REQUIRED) {
    const value = headers[name.toLowerCase()];
    if (typeof value !== 'string' || value.trim() === '') throw new MissingHeaderError(name);
    found[field] = value;
  }
  const attempt = headers['x-service-attempt'];
  return {
    ...(found as Omit<DeliveryHeaders, 'attempt'>),
    attempt: typeof attempt === 'string' && /^[1-9][0-9]{0,8}$/.test(attempt) ? Number(attempt) : null,
  };
}

/** The timestamp is ASCII digits only (no sign, point or exponent); exactly the tolerance is allowed. */
export function checkTimestamp(timestamp: string, nowMs: number, toleranceSeconds: number): void {
  if (!/^[0-9]+$/.test(timestamp)) throw new MalformedTimestampError();
  const nowSeconds = Math.floor(nowMs / 1000);
  if (Math.abs(nowSeconds - Number(timestamp)) > toleranceSeconds) {
    throw new TimestampOutOfWindowError(toleranceSeconds);
  }
}
