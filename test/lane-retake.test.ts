import { describe, expect, it } from 'vitest';
import { createFanoutStore } from '../src/store/fanout-store.js';
import { engines } from './support/databases.js';
import { waitFor } from './support/fanout.js';
import { allDelivered, fanoutFixture, heldPartitions, hook } from './support/fanout-relay.js';

/**
 * A lane that lost its partitions (a stall) and took them back under a new epoch reads them again
 * from their cursors; an entry of the old holding still under way ends undone, and must not leave
 * the box's entries of the new holding undone behind it (nothing would read them again).
 */
describe.each(engines)('a lane taking its partitions back on $name', (engine) => {
  const { server, relay, defer } = fanoutFixture();

  it("goes on with a box whose entry of the lost holding ended undone: the box's events read again are delivered", async () => {
    let release!: () => void;
    const firstAnswered = new Promise<void>((resolve) => (release = resolve));
    // The first request is held until the partitions changed hands, then fails: the lane that sent it
    // may no longer write its retry (its epoch passed), so that entry ends undone.
    const target = await server((_req, i) => (i === 0 ? { status: 503, until: firstAnswered } : 200));
    const t = await relay({ database: await engine.migratedUrl(), hooks: [hook('h', target.url, { ordering: 'per-box', concurrency: 4 })] });
    const first = (await t.post({ boxId: 'bx_stalled' })).deliveryId;
    await target.receivedAtLeast(1);

    // Another holder takes every partition (as a take after this relay's leases ran out: a new epoch), then gives them back.
    const db = t.relay.store.database.kysely;
    const taken = await db.updateTable('log_cursors').set((eb) => ({ lease_owner: 'other', epoch: eb('epoch', '+', 1) })).where('sink', '=', 'h').returning('part').execute();
    expect(taken.length).toBeGreaterThan(0);
    await createFanoutStore(t.relay.store.database).log.releaseParts({ sink: 'h', owner: 'other', parts: taken.map((p) => p.part) });
    defer(async () => release());
    // The relay's next renewal takes them again, each under a new epoch, and reads them from their cursors.
    await waitFor(async () => (await heldPartitions(t)).filter((p) => p.sink === 'h' && p.lease_owner !== null).length === taken.length, 'the relay to take its partitions back');
    // An event of another box, read with the stalled box's event again (the read starts at the cursors): once it
    // has arrived, the event read again has been started, behind the first request still under way.
    const other_box = (await t.post({ boxId: 'bx_other' })).deliveryId;
    await target.receivedAtLeast(2);
    release();

    const requests = await target.received(3);
    expect(requests.map((r) => r.headers['webhook-id'])).toEqual([first, other_box, first]);
    await allDelivered(t, 'h');
  });
});
