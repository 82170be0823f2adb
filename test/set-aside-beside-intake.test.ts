import { describe, expect, it } from 'vitest';
import { allDelivered, fanoutFixture, fastTuning, hook, outboxRows } from './support/fanout-relay.js';
import { engines } from './support/databases.js';
import { recordEvent, waitFor } from './support/fanout.js';
import type { TestRelay } from './support/relay.js';
import { openStore, type Store } from '../src/store/store.js';

const { server, relay } = fanoutFixture();

/** The removed hook's backlog: enough one-entry steps that setting it aside takes many turns. */
const BACKLOG = 400;

/**
 * Section 19: while a removed sink's backlog is set aside, new deliveries are answered as usual. The
 * set-aside runs beside the lanes and the receiver, from the start, not before the relay listens;
 * a stop in the middle leaves the rest for the next pass, with nothing lost.
 */
describe.each(engines)('setting aside beside the intake, on $name', (engine) => {
  const setAsideCount = async (t: TestRelay | Store) => (await outboxRows(t, 'gone')).filter((row) => row.status === 'set_aside').length;

  it('answers deliveries while a backlog is set aside, stops in the middle, and the next start sets aside the rest', async () => {
    const receiver = await server();
    const database = await engine.migratedUrl();
    // One-entry steps; on PostgreSQL no grace, so this replica sets `gone` aside from its start as SQLite's only process does.
    const dispatch = { ...fastTuning, setAsideBatch: 1, unservedGraceMs: 0 };
    const seeding = await relay({ database, hooks: [hook('gone', receiver.url), hook('kept', receiver.url)] }, { start: false, dispatch });
    const receivedAt = seeding.clock.now();
    for (let i = 0; i < BACKLOG; i += 50) {
      await Promise.all(Array.from({ length: 50 }, (_, j) => recordEvent(seeding.relay.store, { receivedAt, boxId: `bx_${(i + j) % 7}`, sinks: ['gone'] })));
    }
    await seeding.close();

    const first = await relay({ database, hooks: [hook('kept', receiver.url)] }, { dispatch });
    const answered = await first.post();
    expect(answered.status).toBe(200);
    // Answered while the set-aside has moved only part of the backlog (before, it ran whole before the start resolved).
    const whenAnswered = await setAsideCount(first);
    expect(whenAnswered).toBeLessThan(BACKLOG);
    await waitFor(async () => (await setAsideCount(first)) > 0, 'the set-aside under way');
    await first.close();
    const stopped = await openStore({ url: database });
    const whenStopped = await setAsideCount(stopped).finally(() => stopped.close());
    expect(whenStopped).toBeLessThan(BACKLOG);

    const second = await relay({ database, hooks: [hook('kept', receiver.url)] }, { dispatch });
    await waitFor(async () => (await setAsideCount(second)) === BACKLOG, 'the whole backlog set aside', 30_000);
    await allDelivered(second, 'kept');
    expect(receiver.requests.filter((r) => r.headers['webhook-id'] === answered.deliveryId)).toHaveLength(1);
    expect(await outboxRows(second, 'gone')).toHaveLength(BACKLOG);
    // pino's levels: 40 warn, 50 error.
    expect(second.logs.entries().filter((entry) => Number(entry.level) >= 50)).toEqual([]);
    await second.logs.waitFor((entry) => entry.level === 40 && entry.sink === 'gone' && entry.rows === BACKLOG - whenStopped);
  });
});
