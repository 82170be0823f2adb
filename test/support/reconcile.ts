import type { FakeSandbox } from './fake-sandbox.js';
import { hook } from './fanout-relay.js';
import type { TestRelay } from './relay.js';

/** Upstream retries in milliseconds, so fault tests do not wait out real backoff. */
export const fastUpstream = { minTimeout: 5, maxTimeout: 20, randomize: false };

/** A relay's settings to reconcile against the fake upstream on demand only, unthrottled, with one hook taking `events`. */
export function reconcileSettings(upstream: FakeSandbox, hookUrl: string, events?: string[]): Record<string, unknown> {
  return {
    upstreamBaseUrl: upstream.baseUrl,
    upstreamApiKey: upstream.apiKey,
    reconcileInterval: '0',
    reconcileMaxRps: 1000,
    hooks: [hook('all', hookUrl, events === undefined ? {} : { events })],
  };
}

/** The relay's watch start (contract section 9): events before it are not the relay's to relay. */
export async function setWatchStart(t: TestRelay, ms: number): Promise<void> {
  await t.relay.store.database.kysely.updateTable('relay_meta').set({ value: new Date(ms).toISOString() }).where('name', '=', 'watch_start').execute();
}

/** A promise the test settles by hand: an upstream request held (`hold` fault) as long as the test wants. */
export function gate(): { until: Promise<void>; open(): void } {
  let open!: () => void;
  const until = new Promise<void>((resolve) => (open = resolve));
  return { until, open };
}
