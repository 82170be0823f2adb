import request from 'supertest';
import { describe, expect, it } from 'vitest';
import { sql } from 'kysely';
import { adminAuth, advanceAndWake, allDelivered, fanoutFixture, fastTuning, hook, outboxRows } from './support/fanout-relay.js';
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
    const t = await relay({ database: await engine.migratedUrl(), hooks: [hook('flaky', flaky.url)] }, { dispatch: tuning });
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

describe('a log entry whose outcome the store refuses at first', () => {
  it('is written down once the store takes it again: retried later, not stranded, and its box\'s next event waits behind it', async () => {
    let down = true;
    const flaky = await server(() => (down ? 503 : 200));
    const t = await relay({ hooks: [hook('flaky', flaky.url, { ordering: 'per-box' })] }, { dispatch: tuning });
    const db = t.relay.store.database.kysely;
    await sql`CREATE TRIGGER refuse_outbox BEFORE INSERT ON outbox BEGIN SELECT RAISE(ABORT, 'refused by the test'); END`.execute(db);

    const first = (await t.post({ boxId: 'bx_1' })).deliveryId;
    await t.logs.waitFor((entry) => entry.msg === 'could not write down the outcome of an event; trying again' && entry.eventId === first);
    const second = (await t.post({ boxId: 'bx_1' })).deliveryId;
    await sql`DROP TRIGGER refuse_outbox`.execute(db);

    // Both written down: the failed one as a retry, the next of its box behind it, unsent.
    const rows = await waitFor(async () => {
      const found = await outboxRows(t, 'flaky');
      return found.length === 2 ? found : undefined;
    }, 'both events written down');
    expect(rows.map((row) => [row.delivery_id, row.status, row.attempts])).toEqual([
      [first, 'pending', 1],
      [second, 'pending', 0],
    ]);
    expect(flaky.requests.map((r) => r.headers['webhook-id'])).toEqual([first]);

    // The retry waits 10 minutes jittered to 8-12: past 12, it is due whatever the jitter drew.
    down = false;
    advanceAndWake(t, 13 * 60_000);
    await flaky.received(3);
    await allDelivered(t, 'flaky');
    expect(flaky.requests.map((r) => r.headers['webhook-id'])).toEqual([first, first, second]);
  });
});
