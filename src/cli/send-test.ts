import { randomBytes } from 'node:crypto';
import { signDelivery } from '../verify/signature.js';

export interface SendTestOptions {
  url: string;
  secret: string;
  type: string;
  box: string;
  name?: string;
  /** Unix seconds; defaults to now. */
  timestamp?: number;
  fetch?: typeof fetch;
}

export interface SendTestResult {
  status: number;
  body: string;
  deliveryId: string;
}

/** Signs and posts one delivery exactly as the upstream does (headers, key, signed string). */
export async function sendTest(options: SendTestOptions): Promise<SendTestResult> {
  const deliveryId = `evt_${randomBytes(16).toString('hex')}`;
  const timestamp = String(options.timestamp ?? Math.floor(Date.now() / 1000));
  const state = options.type === 'box.error' ? 'error' : options.type === 'box.archived' ? 'archived' : 'ready';
  const data =
    options.type === 'box.hydrated'
      ? { box: { id: options.box, name: options.name ?? options.box } }
      : { box: { id: options.box, name: options.name ?? options.box }, previousState: 'cloning', state };
  const body = Buffer.from(JSON.stringify({ id: deliveryId, type: options.type, createdAt: new Date().toISOString(), data }));
  const response = await (options.fetch ?? fetch)(options.url, {
    method: 'POST',
    headers: {
      'Content-Type': 'application/json',
      'X-Service-Event': options.type,
      'X-Service-Delivery': deliveryId,
      'X-Service-Timestamp': timestamp,
      'X-Service-Signature': signDelivery(Buffer.from(options.secret, 'utf8'), deliveryId, timestamp, body),
      'X-Service-Attempt': '1',
    },
    body,
  });
  return { status: response.status, body: await response.text(), deliveryId };
}
