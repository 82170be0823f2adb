import { parseEvent } from '../../src/events/parse-event.js';
import type { Store } from '../../src/store/store.js';
import { delivery, type DeliveryOptions } from './sign.js';

/** Stores one delivery through the receiver's real write path; returns its event id. */
export async function recordEvent(
  store: Store,
  options: { receivedAt: number; sinks: string[] } & Partial<DeliveryOptions>,
): Promise<string> {
  const d = delivery({ timestamp: Math.floor(options.receivedAt / 1000), ...options });
  await store.writer.record({ event: parseEvent(d.body, d.id), receivedAt: options.receivedAt, attempt: 1, sinks: options.sinks });
  return d.id;
}

/** Resolves once `check` holds, polling the (real) state it reads; fails with `what` after `timeoutMs`. */
export async function waitFor<T>(check: () => T | Promise<T>, what: string, timeoutMs = 15_000): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value) return value as NonNullable<T>;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}
