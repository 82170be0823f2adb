import pg from 'pg';
import request from 'supertest';
import { describe, expect, it } from 'vitest';
import { engines } from './support/databases.js';
import { databaseNowMs, waitFor } from './support/fanout.js';
import { adminAuth, fanoutFixture, hook } from './support/fanout-relay.js';

const { defer, server, relay } = fanoutFixture();
const DAY_MS = 86_400_000;

describe.each(engines)('GET /admin/log on $name', (engine) => {
  it('says how long the oldest stored delivery has waited for its place in the log, 0 once numbered', async () => {
    const url = await engine.migratedUrl();
    const t = await relay({ database: url, hooks: [hook('h', (await server()).url)] });
    const heldBack = async () => {
      const response = await request(t.relay.internalApp).get('/admin/log').set(adminAuth);
      expect(response.status).toBe(200);
      return (response.body as { log: { heldBackSeconds: number } }).log.heldBackSeconds;
    };
    expect(await heldBack()).toBe(0);
    if (engine.name !== 'postgres') return;
    // Another client holds the log's numbering lock: what the relay stores waits for its position meanwhile.
    const other = new pg.Client(url);
    await other.connect();
    defer(() => other.end());
    await other.query('BEGIN');
    await other.query(`SELECT pg_advisory_xact_lock(hashtextextended('boxrelay log ' || current_schema(), 0))`);
    const databaseNow = await databaseNowMs(other);
    // This replica's clock a day off the database's either way: the delivery's age is read by the clock
    // that stamped it, so the skew never shows as a wait (nor hides one).
    for (const skew of [-DAY_MS, DAY_MS]) {
      t.clock.set(databaseNow + skew);
      expect((await t.post({ boxId: `bx_skew_${skew}` })).status).toBe(200);
      t.clock.advance(90_000);
      expect(await heldBack()).toBe(90);
      await other.query('ROLLBACK');
      await waitFor(async () => (await heldBack()) === 0, 'the delivery to be numbered');
      await other.query('BEGIN');
      await other.query(`SELECT pg_advisory_xact_lock(hashtextextended('boxrelay log ' || current_schema(), 0))`);
    }
    await other.query('ROLLBACK');
  });
});
