import BetterSqlite3 from 'better-sqlite3';
import request from 'supertest';
import { afterEach, describe, expect, it } from 'vitest';
import { testRelay, type TestRelay } from './support/relay.js';

describe('health', () => {
  let t: TestRelay;
  afterEach(() => t.close());

  it('answers bare health on the public port and names checks on the internal port', async () => {
    t = await testRelay();
    expect((await request(t.relay.publicApp).get('/healthz')).body).toEqual({ ok: true });
    expect((await request(t.relay.publicApp).get('/readyz')).body).toEqual({ ok: true });
    expect((await request(t.relay.internalApp).get('/readyz')).body).toEqual({ ok: true, checks: { storage: 'ok' } });
    expect((await request(t.relay.internalApp).get('/healthz')).body).toEqual({ ok: true });
    const post = await request(t.relay.publicApp).post('/healthz');
    expect([post.status, post.body.code, post.headers.allow]).toEqual([405, 'method_not_allowed', 'GET, HEAD']);
  });

  it('is not ready while storage cannot commit, and ready again after', async () => {
    t = await testRelay();
    const database = t.relay.store.database;
    if (database.dialect !== 'sqlite') throw new Error('expected SQLite');
    database.sqlite.pragma('busy_timeout = 20');
    const other = new BetterSqlite3(t.config.database);
    other.exec('BEGIN IMMEDIATE');
    const down = await request(t.relay.internalApp).get('/readyz');
    expect(down.status).toBe(503);
    // The internal answer says why, and the cause is logged.
    expect(down.body).toEqual({ ok: false, checks: { storage: 'down' }, errors: { storage: 'SQLITE_BUSY: database is locked' } });
    expect(t.logs.entries().filter((e) => e.msg === 'storage failure').map((e) => e.reason)).toEqual(['SQLITE_BUSY: database is locked']);
    expect((await request(t.relay.publicApp).get('/readyz')).body).toEqual({ ok: false });
    expect(await t.registry.getSingleMetricAsString('boxrelay_ready')).toContain('boxrelay_ready 0');
    other.exec('ROLLBACK');
    other.close();
    t.clock.advance(1000);
    expect((await request(t.relay.internalApp).get('/readyz')).status).toBe(200);
  });

  it('is not ready once a shutdown starts (drain), on both ports, while it still accepts deliveries', async () => {
    t = await testRelay();
    t.relay.drain();
    const internal = await request(t.relay.internalApp).get('/readyz');
    expect([internal.status, internal.body]).toEqual([503, { ok: false, checks: { storage: 'ok' }, shuttingDown: true }]);
    const pub = await request(t.relay.publicApp).get('/readyz');
    expect([pub.status, pub.body]).toEqual([503, { ok: false }]);
    expect(await t.registry.getSingleMetricAsString('boxrelay_ready')).toContain('boxrelay_ready 0');
    expect((await t.post()).status).toBe(200);
  });
});
