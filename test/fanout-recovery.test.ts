import request from 'supertest';
import { describe, expect, it } from 'vitest';
import { adminAuth, fanoutFixture, fastTuning, hook, outboxRows } from './support/fanout-relay.js';
import { engines } from './support/databases.js';
import { waitFor } from './support/fanout.js';
import type { TestRelay } from './support/relay.js';

const { server, relay } = fanoutFixture();

/** Scheduled retries wait 10 minutes (jittered to 8-12): what recovery must not make an operator wait out. */
const tuning = { ...fastTuning, quickRetries: 0, retryDelayMs: () => 600_000 };

describe.each(engines)('a failing hook that delivers again, on $name', (engine) => {
  const deliveryOf = async (t: TestRelay, id: string) => {
    const response = await request(t.relay.internalApp).get(`/admin/events/${id}`).set(adminAuth);
    return (response.body.deliveries as { status: string; attempts: number; lastError: string | null }[])[0];
  };

  it('makes its backed-off work due at once, by the clock that has not moved; a short run of failures does not', async () => {
    let down = true;
    const flaky = await server(() => (down ? 503 : 200));
    const t = await relay({ database: await engine.url(), hooks: [hook('flaky', flaky.url)] }, { dispatch: tuning });
    const failedOnce = (id: string) => waitFor(async () => (await deliveryOf(t, id))?.attempts === 1, `${id} to fail once`);

    const first = (await t.post()).deliveryId;
    await failedOnce(first);
    t.clock.advance(120_000);
    const second = (await t.post()).deliveryId;
    await failedOnce(second);

    // Two minutes of failures, then the hook answers: a new event is delivered, and with it the two
    // that wait 8-12 minutes are due now. The clock stays where it is: only that makes them due.
    down = false;
    t.clock.advance(1000);
    const third = (await t.post()).deliveryId;
    for (const id of [third, first, second]) {
      await waitFor(async () => (await deliveryOf(t, id))?.status === 'delivered', `${id} delivered`);
    }
    expect(await deliveryOf(t, first)).toMatchObject({ status: 'delivered', attempts: 2, lastError: 'http_503: hook answered 503' });
    expect(await deliveryOf(t, second)).toMatchObject({ status: 'delivered', attempts: 2 });
    expect(flaky.requests).toHaveLength(5);

    // One failure among good deliveries (a run shorter than a minute) leaves its retry where it was
    // scheduled: an event that keeps failing is not sent again at every success.
    down = true;
    const failing = (await t.post()).deliveryId;
    await failedOnce(failing);
    down = false;
    t.clock.advance(1000);
    const good = (await t.post()).deliveryId;
    await waitFor(async () => (await deliveryOf(t, good))?.status === 'delivered', 'the next event delivered');
    // A recovery makes the work due before the delivery that ends the run is recorded, so by now it would show.
    const [waiting] = await outboxRows(t, 'flaky');
    expect(waiting).toMatchObject({ delivery_id: failing, status: 'pending', attempts: 1 });
    expect(waiting!.next_attempt_at).toBeGreaterThan(t.clock.now() + 400_000);
    await flaky.received(7);
  });
});
