import { afterEach, describe, expect, it } from 'vitest';
import { engines } from './support/databases.js';
import { dispatchHarness, type Harness, type HarnessOptions } from './support/dispatch-harness.js';
import { hookServer, type HookServer } from './support/hook-server.js';

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});
const harness = (options: HarnessOptions): Promise<Harness> => dispatchHarness(cleanups, options);

async function hook(answer?: Parameters<typeof hookServer>[0]): Promise<HookServer> {
  const server = await hookServer(answer);
  cleanups.push(() => server.close());
  return server;
}

/** The lane with its reads of the next due time counted. */
async function countingDueReads(url: string, target: HookServer): Promise<{ t: Harness; dueReads: () => number }> {
  let reads = 0;
  const t = await harness({
    url,
    config: { hooks: [{ name: 'h', url: target.url }] },
    // Only the poll would find a retry the lane did not arm a timer for: it does not come in this test's time.
    tuning: { pollMs: 60_000, quickRetries: 0, retryDelayMs: () => 100 },
    wrapStore: (store) => ({ ...store, exceptions: { ...store.exceptions, nextDueAt: (sink, owner) => (reads++, store.exceptions.nextDueAt(sink, owner)) } }),
  });
  return { t, dueReads: () => reads };
}

describe.each(engines)('when the next outbox row is due, on $name', ({ url }) => {
  it('is not read again for each new delivery that only went out', async () => {
    const target = await hook();
    const { t, dueReads } = await countingDueReads(await url(), target);
    const before = dueReads();
    for (let i = 1; i <= 30; i++) {
      await t.post(`bx_due_${i}`);
      await target.received(i);
    }
    await t.dispatcher.whenIdle();
    // Once per delivery before: 30 reads.
    expect(dueReads() - before).toBeLessThanOrEqual(2);
  });

  it('is read again once the lane wrote a retry, which goes out at its time and not at the poll', async () => {
    const target = await hook((_request, index) => (index === 0 ? 503 : 200));
    const { t, dueReads } = await countingDueReads(await url(), target);
    const before = dueReads();
    const id = await t.post('bx_due_retry');
    const [first, second] = await target.received(2);
    expect([first!.headers['webhook-id'], second!.headers['webhook-id']]).toEqual([id, id]);
    expect(dueReads()).toBeGreaterThan(before);
  });
});
