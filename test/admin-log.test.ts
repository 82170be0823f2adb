import pg from 'pg';
import request from 'supertest';
import { describe, expect, it } from 'vitest';
import { engines } from './support/databases.js';
import { databaseNowMs, storeUnnumbered, waitFor } from './support/fanout.js';
import { adminAuth, fanoutFixture, hook } from './support/fanout-relay.js';

const { defer, server, relay } = fanoutFixture();
const DAY_MS = 86_400_000;

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
    const storedAt = await databaseNowMs(other);
    await storeUnnumbered(other, { id: 'evt_held', boxId: 'bx_held', receivedAt: storedAt - 90_000 });
    await other.query('BEGIN');
    await other.query(`SELECT id FROM deliveries WHERE id = 'evt_held' FOR UPDATE`);
    await t.relay.store.sequenceLog();
    // This replica's clock a day off either way: the wait is the database's to measure, so the figure stays.
    for (const skew of [-DAY_MS, DAY_MS]) {
      t.clock.set(storedAt + skew);
      const seconds = await heldBack();
      expect(seconds).toBeGreaterThanOrEqual(90);
      expect(seconds).toBeLessThan(DAY_MS / 1000 / 2);
    }
    await other.query('ROLLBACK');
    await t.relay.store.sequenceLog();
    await waitFor(async () => (await heldBack()) === 0, 'the delivery to be numbered');
  });
});
