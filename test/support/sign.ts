import type { Test } from 'supertest';
import { randomBytes } from 'node:crypto';
import { signDelivery } from '../../src/verify/signature.js';

export const SECRET = 'whsec_dGVzdC1zZWNyZXQtMDEyMzQ1Njc4OWFiY2RlZg==';

export function eventId(): string {
  return `evt_${randomBytes(16).toString('hex')}`;
}

export interface DeliveryOptions {
  id?: string;
  type?: string;
  boxId?: string;
  boxName?: string;
  state?: string;
  previousState?: string;
  createdAt?: string;
  /** Unix seconds of the attempt. */
  timestamp: number;
  secret?: string;
  /** Replace the body (still signed unless `signature` is given). */
  body?: string | Buffer;
  signature?: string;
  attempt?: number;
}

export interface Delivery {
  id: string;
  body: Buffer;
  headers: Record<string, string>;
}

/** A delivery signed exactly as the Sandbox Service signs it (whole-secret UTF-8 key). */
export function delivery(options: DeliveryOptions): Delivery {
  const id = options.id ?? eventId();
  const type = options.type ?? 'box.ready';
  const data =
    type === 'box.hydrated'
      ? { box: { id: options.boxId ?? 'bx_abc', name: options.boxName ?? 'ci-42' } }
      : {
          box: { id: options.boxId ?? 'bx_abc', name: options.boxName ?? 'ci-42' },
          previousState: options.previousState ?? 'cloning',
          state: options.state ?? (type === 'box.error' ? 'error' : type === 'box.archived' ? 'archived' : 'ready'),
        };
  const createdAt = options.createdAt ?? new Date(options.timestamp * 1000).toISOString();
  const body =
    options.body === undefined ? Buffer.from(JSON.stringify({ id, type, createdAt, data })) : Buffer.from(options.body);
  const timestamp = String(options.timestamp);
  return {
    id,
    body,
    headers: {
      'Content-Type': 'application/json',
      'X-Service-Event': type,
      'X-Service-Delivery': id,
      'X-Service-Timestamp': timestamp,
      'X-Service-Signature':
        options.signature ?? signDelivery(Buffer.from(options.secret ?? SECRET, 'utf8'), id, timestamp, body),
      'X-Service-Attempt': String(options.attempt ?? 1),
    },
  };
}

/**
 * Sends the exact bytes: under a JSON content type supertest would JSON-encode a Buffer, so its
 * serializer is replaced by one that hands the Buffer over untouched (typed as string by superagent).
 */
export function sendRaw(test: Test, body: Buffer): Test {
  const bytes = body as unknown as string;
  return test.serialize(() => bytes).send(bytes);
}
