import { createHmac, randomUUID, timingSafeEqual } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import { signDelivery } from '../src/verify/signature.js';

/** The signing secret every target is configured with; the relay's first key (whole-string UTF-8) matches. */
export const BENCH_SECRET = 'whsec_YmVuY2gtc2lnbmluZy1zZWNyZXQtMDEyMzQ1Njc4OQ==';
const KEY = Buffer.from(BENCH_SECRET, 'utf8');

/** Bodies of about this many bytes, as the issue asks. */
export const BODY_BYTES = 1024;

/** Stored history: realistic upstream events are about this size. */
export const STORED_BODY_BYTES = 300;

/** Boxes the load and the pre-fill share, so box upserts hit existing rows as in production. */
export const BOX_COUNT = 10_000;

const TYPES = ['box.ready', 'box.ready', 'box.error', 'box.archived', 'box.hydrated'] as const;
const STATES: Record<string, [string, string]> = {
  'box.ready': ['cloning', 'ready'],
  'box.error': ['running', 'error'],
  'box.archived': ['archiving', 'archived'],
};

/** `evt_<32 hex>` like the upstream's ids; random, so the primary key sees random inserts. */
export function newEventId(): string {
  return `evt_${randomUUID().replaceAll('-', '')}`;
}

export function boxIdOf(n: number): string {
  return `bx_${String(n % BOX_COUNT).padStart(6, '0')}`;
}

/** A realistic delivery payload (contract shape plus unknown fields), padded to about `bytes`. */
export function eventBody(id: string, n: number, createdAt: string, bytes = BODY_BYTES): { type: string; body: string } {
  const type = TYPES[n % TYPES.length] as string;
  const boxId = boxIdOf(n * 7919);
  const states = STATES[type];
  const data: Record<string, unknown> = {
    box: { id: boxId, name: `ci-${boxId.slice(3)}` },
    ...(states ? { previousState: states[0], state: states[1] } : {}),
    labels: { team: 'platform', region: 'eu-west-1' },
    notes: '',
  };
  const bare = JSON.stringify({ id, type, createdAt, data });
  data.notes = 'x'.repeat(Math.max(0, bytes - bare.length));
  return { type, body: JSON.stringify({ id, type, createdAt, data }) };
}

/** Headers and body of one delivery, signed exactly as the upstream signs it (with `secret`, default the bench's), fresh for each call. */
export function signedDelivery(n: number, secret = BENCH_SECRET): { id: string; headers: Record<string, string>; body: Buffer } {
  const id = newEventId();
  const now = Date.now();
  const { type, body } = eventBody(id, n, new Date(now).toISOString());
  const timestamp = String(Math.floor(now / 1000));
  const bytes = Buffer.from(body);
  return {
    id,
    body: bytes,
    headers: {
      'content-type': 'application/json',
      'x-service-event': type,
      'x-service-delivery': id,
      'x-service-timestamp': timestamp,
      'x-service-signature': signDelivery(secret === BENCH_SECRET ? KEY : Buffer.from(secret, 'utf8'), id, timestamp, bytes),
      'x-service-attempt': '1',
    },
  };
}

/** The baselines' whole job: HMAC over `id.timestamp.body`, compared with timingSafeEqual. */
export function verifiesHmac(headers: IncomingHttpHeaders, body: Buffer): boolean {
  const id = headers['x-service-delivery'];
  const timestamp = headers['x-service-timestamp'];
  const signature = headers['x-service-signature'];
  if (typeof id !== 'string' || typeof timestamp !== 'string' || typeof signature !== 'string') return false;
  if (!signature.startsWith('v1=')) return false;
  const given = Buffer.from(signature.slice(3), 'hex');
  const expected = createHmac('sha256', KEY).update(`${id}.${timestamp}.`).update(body).digest();
  return given.length === expected.length && timingSafeEqual(given, expected);
}
