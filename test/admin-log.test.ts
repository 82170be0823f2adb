import pg from 'pg';
import request from 'supertest';
import { describe, expect, it } from 'vitest';
import { engines } from './support/databases.js';
import { storeUnnumbered, waitFor } from './support/fanout.js';
import { adminAuth, fanoutFixture, hook } from './support/fanout-relay.js';

const { defer, server, relay } = fanoutFixture();

describe.each(engines)('GET /admin/log on $name', (engine) => {
  it('says how long the oldest stored delivery has waited for its place in the log, 0 once numbered', async () => {
    const url = await engine.url();
    const t = await relay({ database: url, hooks: [hook('h', (await server()).url)] });
    const heldBack = async () => {
      const response = await request(t.relay.internalApp).get('/admin/log').set(adminAuth);
      expect(response.status).toBe(200);
      return (response.body as { log: { heldBackSeconds: number } }).log.heldBackSeconds;
    };
    expect(await heldBack()).toBe(0);
    if (engine.name !== 'postgres') return;
    // Stored by another process and locked by a client: the sequencer leaves it until it is let go.
    const other = new pg.Client(url);
    await other.connect();
    defer(() => other.end());
    const receivedAt = t.clock.now() - 90_000;
    await storeUnnumbered(other, { id: 'evt_held', boxId: 'bx_held', receivedAt: receivedAt });
    await other.query('BEGIN');
    await other.query(`SELECT id FROM deliveries WHERE id = 'evt_held' FOR UPDATE`);
    await t.relay.store.sequenceLog();
    expect(await heldBack()).toBeGreaterThanOrEqual(90);
    await other.query('ROLLBACK');
    await t.relay.store.sequenceLog();
    await waitFor(async () => (await heldBack()) === 0, 'the delivery to be numbered');
  });
});
