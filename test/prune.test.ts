import request from 'supertest';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { DAY_MS } from '../src/clock.js';
import { pruneExpired } from '../src/store/retention/prune.js';
import type { OutboxStatus } from '../src/store/schema.js';
import { engines } from './support/databases.js';
import { ADMIN_TOKEN, metricValue, pendingCount, readWholeLog, unfinishedIds } from './support/fanout-relay.js';
import { testRelay, type TestRelay } from './support/relay.js';

const RETENTION_DAYS = 30;

for (const engine of engines) {
  describe(`retention on ${engine.name}`, () => {
    let t: TestRelay;
    beforeEach(async () => {
      t = await testRelay({
        database: await engine.migratedUrl(),
        retentionDays: RETENTION_DAYS,
        adminToken: ADMIN_TOKEN,
        // Every event goes to `alerts`; box.error also to `audit`.
        hooks: [
          { name: 'alerts', url: 'http://127.0.0.1:9/a' },
          { name: 'audit', url: 'http://127.0.0.1:9/b', events: ['box.error'] },
        ],
      });
    });
    afterEach(() => t.close());

    const database = () => t.relay.store.database;
    const db = () => database().kysely;
    const logRead = () => readWholeLog(t);
    /**
     * How the dispatcher or an operator leaves an event read from the log: delivered (at its first
     * attempt: no row; later: a `delivered` row), or an outbox row that is pending (a retry), a dead
     * letter, discarded or set aside.
     */
    const setOutbox = async (deliveryId: string, sink: string, status: OutboxStatus) => {
      const changed = await db().updateTable('outbox').set({ status }).where('delivery_id', '=', deliveryId).where('sink', '=', sink).executeTakeFirst();
      if (status === 'delivered' || changed.numUpdatedRows > 0n) return;
      const at = t.clock.now();
      await db()
        .insertInto('outbox')
        .values({ delivery_id: deliveryId, sink, status, attempts: 1, next_attempt_at: at, created_at: at, updated_at: at, box_id: null, trace_parent: null })
        .execute();
    };
    const deliveryIds = async () => (await db().selectFrom('deliveries').select('id').orderBy('id').execute()).map((r) => r.id).sort();
    const outboxRows = async () =>
      (await db().selectFrom('outbox').select(['delivery_id', 'sink', 'status']).execute())
        .map((r) => `${r.delivery_id}/${r.sink}/${r.status}`)
        .sort();
    const boxIds = async () => (await db().selectFrom('boxes').select('id').execute()).map((r) => r.id).sort();

    it('removes old handled deliveries and silent boxes; keeps unhandled work and recent data', async () => {
      const now = t.clock.now();
      t.clock.set(now - (RETENTION_DAYS + 1) * DAY_MS);
      const handled = (await t.post({ boxId: 'bx_old' })).deliveryId;
      const pending = (await t.post({ boxId: 'bx_old' })).deliveryId;
      const dead = (await t.post({ boxId: 'bx_old' })).deliveryId;
      const setAside = (await t.post({ boxId: 'bx_old' })).deliveryId;
      const discarded = (await t.post({ boxId: 'bx_old' })).deliveryId;
      const half = (await t.post({ type: 'box.error', boxId: 'bx_old' })).deliveryId;
      const oldOfLiveBox = (await t.post({ boxId: 'bx_live' })).deliveryId;
      t.clock.set(now - (RETENTION_DAYS - 1) * DAY_MS);
      const recent = (await t.post({ boxId: 'bx_live' })).deliveryId;
      await logRead();
      // Old, but after every cursor: `alerts` has not read it yet.
      t.clock.set(now - (RETENTION_DAYS + 1) * DAY_MS);
      const unread = (await t.post({ boxId: 'bx_live' })).deliveryId;
      t.clock.set(now);
      for (const id of [handled, oldOfLiveBox, recent]) await setOutbox(id, 'alerts', 'delivered');
      await setOutbox(pending, 'alerts', 'pending');
      await setOutbox(dead, 'alerts', 'dead');
      await setOutbox(setAside, 'alerts', 'set_aside');
      await setOutbox(discarded, 'alerts', 'discarded');
      await setOutbox(half, 'audit', 'pending'); // delivered to `alerts`, still pending for `audit`

      const result = await pruneExpired(database(), { now, retentionDays: RETENTION_DAYS, batchSize: 2 });

      // Settled events (delivered, discarded) go; unsettled ones keep their delivery, and so does an event a sink has not read.
      expect(result).toEqual({
        cutoff: now - RETENTION_DAYS * DAY_MS,
        deliveries: 3,
        boxes: 0,
        expiredSecrets: 0,
        audit: 0,
        removed: expect.objectContaining({ deliveries: 3, boxes: 0 }),
        failedSteps: [],
      });
      expect(await deliveryIds()).toEqual([pending, dead, setAside, half, recent, unread].sort());
      expect(await outboxRows()).toEqual([`${pending}/alerts/pending`, `${dead}/alerts/dead`, `${setAside}/alerts/set_aside`, `${half}/audit/pending`].sort());
      // bx_old is silent past the window, but in `error` (by `half`) and with work pending for its events: it stays.
      expect(await boxIds()).toEqual(['bx_live', 'bx_old']);

      // Once handled (and read), the kept deliveries go on the next run.
      await setOutbox(pending, 'alerts', 'delivered');
      await logRead();
      expect(await pruneExpired(database(), { now, retentionDays: RETENTION_DAYS })).toMatchObject({ deliveries: 2, boxes: 0 });
      expect(await pruneExpired(database(), { now, retentionDays: RETENTION_DAYS })).toMatchObject({ deliveries: 0, boxes: 0 });
      // With no work left (the dead letters discarded, the rest delivered) its events go; the box, in `error`, stays.
      for (const id of [dead, setAside]) await setOutbox(id, 'alerts', 'discarded');
      await setOutbox(half, 'audit', 'delivered');
      expect(await pruneExpired(database(), { now, retentionDays: RETENTION_DAYS })).toMatchObject({ deliveries: 3, boxes: 0 });
      expect(await boxIds()).toEqual(['bx_live', 'bx_old']);
    });

    it('keeps a box in error past the window until something changes it, and a box with work pending; forgets the rest; /admin/boxes and the boxes gauge agree', async () => {
      const now = t.clock.now();
      const admin = (path: string) => request(t.relay.internalApp).get(path).set({ Authorization: `Bearer ${ADMIN_TOKEN}` });
      const listed = async () => ((await admin('/admin/boxes')).body.boxes as { id: string; state: string }[]).map((box) => `${box.id}:${box.state}`).sort();
      const gauge = async () =>
        Object.fromEntries(
          await Promise.all(['error', 'ready'].map(async (state) => [state, await metricValue(t.registry, 'boxrelay_boxes', { state })] as const)),
        );
      const prune = () => pruneExpired(database(), { now: t.clock.now(), retentionDays: RETENTION_DAYS });
      t.clock.set(now - (RETENTION_DAYS + 1) * DAY_MS);
      await t.post({ type: 'box.error', boxId: 'bx_error' });
      const retried = (await t.post({ boxId: 'bx_retried' })).deliveryId;
      await t.post({ boxId: 'bx_idle' });
      await logRead();
      // Not yet read by `alerts` (past its cursor), and a delivery failed once and due again.
      await t.post({ boxId: 'bx_unread' });
      await setOutbox(retried, 'alerts', 'pending');
      t.clock.set(now);

      expect(await prune()).toMatchObject({ boxes: 1 });
      expect(await boxIds()).toEqual(['bx_error', 'bx_retried', 'bx_unread']);
      expect(await listed()).toEqual(['bx_error:error', 'bx_retried:ready', 'bx_unread:ready']);
      expect(await gauge()).toEqual({ error: 1, ready: 2 });

      // The work done: those two go, the box in error stays (nothing changed it).
      await setOutbox(retried, 'alerts', 'delivered');
      await logRead();
      expect(await prune()).toMatchObject({ boxes: 2 });
      expect(await listed()).toEqual(['bx_error:error']);
      expect(await gauge()).toEqual({ error: 1, ready: 0 });
      t.clock.advance(365 * DAY_MS);
      expect(await prune()).toMatchObject({ boxes: 0 });
      expect(await listed()).toEqual(['bx_error:error']);

      // A newer event moves it out of error: it is then forgotten once that event has left the window.
      await t.post({ type: 'box.ready', boxId: 'bx_error' });
      await logRead();
      expect(await listed()).toEqual(['bx_error:ready']);
      t.clock.advance((RETENTION_DAYS + 1) * DAY_MS);
      expect(await prune()).toMatchObject({ boxes: 1 });
      expect(await listed()).toEqual([]);
      expect(await gauge()).toEqual({ error: 0, ready: 0 });
    });

    it('forgets every silent box across the windows of its pass over the boxes, and no other', async () => {
      const now = t.clock.now();
      const old = now - (RETENTION_DAYS + 1) * DAY_MS;
      // 450 boxes: with batches of 2 the pass reads them in windows of 200, each in several batches.
      const boxes = Array.from({ length: 450 }, (_, i) => ({
        id: `bx_${String(i).padStart(3, '0')}`,
        state: i % 10 === 5 ? 'error' : 'ready',
        last_seen_at: i % 10 === 0 || i % 10 === 5 ? old : now,
      }));
      await db().insertInto('boxes').values(boxes).execute();
      const silent = boxes.filter((b) => b.last_seen_at === old && b.state !== 'error').map((b) => b.id);
      expect(await pruneExpired(database(), { now, retentionDays: RETENTION_DAYS, batchSize: 2 })).toMatchObject({ boxes: silent.length });
      expect(await boxIds()).toEqual(boxes.map((b) => b.id).filter((id) => !silent.includes(id)));
    });

    it('ends the dedup window of a pruned delivery: the same id is then accepted as new', async () => {
      const now = t.clock.now();
      const id = 'evt_0123456789abcdef0123456789abcdef';
      t.clock.set(now - (RETENTION_DAYS + 1) * DAY_MS);
      expect((await t.post({ id })).body.duplicate).toBe(false);
      t.clock.set(now);
      expect((await t.post({ id })).body.duplicate).toBe(true);
      await logRead();
      expect(await pruneExpired(database(), { now, retentionDays: RETENTION_DAYS })).toMatchObject({ deliveries: 1 });
      expect((await t.post({ id })).body.duplicate).toBe(false);
    });

    it('numbers a delivery after the pruned ones: one that comes when every stored delivery was removed is still read by the sinks', async () => {
      const now = t.clock.now();
      t.clock.set(now - (RETENTION_DAYS + 1) * DAY_MS);
      for (let i = 0; i < 3; i++) await t.post();
      await logRead();
      t.clock.set(now);
      expect(await pruneExpired(database(), { now, retentionDays: RETENTION_DAYS })).toMatchObject({ deliveries: 3 });
      const fresh = (await t.post()).deliveryId;
      expect(await unfinishedIds(t, 'alerts')).toEqual(new Set([fresh]));
      expect(await pendingCount(t, 'alerts')).toBe(1);
      // Not removed either, while `alerts` has not read it.
      expect(await pruneExpired(database(), { now: now + (RETENTION_DAYS + 1) * DAY_MS, retentionDays: RETENTION_DAYS })).toMatchObject({ deliveries: 0 });
      expect(await deliveryIds()).toEqual([fresh]);
    });

    it('removes signing secrets past their expiry, and keeps those in their grace period or without one', async () => {
      const now = t.clock.now();
      const secret = (name: string, expiresAt: number | null) => ({ secret: name, webhook_id: 'wh_1', created_at: now - DAY_MS, expires_at: expiresAt });
      await db().insertInto('secrets').values([secret('expired', now - 1), secret('in-grace', now + 60_000), secret('current', null)]).execute();
      expect(await pruneExpired(database(), { now, retentionDays: RETENTION_DAYS })).toMatchObject({ expiredSecrets: 1 });
      const left = await db().selectFrom('secrets').select('secret').orderBy('secret').execute();
      expect(left.map((r) => r.secret)).toEqual(['current', 'in-grace']);
    });

    it('yields to the event loop between batches, and stops there when aborted', async () => {
      const now = t.clock.now();
      t.clock.set(now - (RETENTION_DAYS + 1) * DAY_MS);
      for (let i = 0; i < 6; i++) await t.post({ boxId: `bx_${i}` });
      await logRead();
      t.clock.set(now);
      const stop = new AbortController();
      // Runs only if the prune lets the event loop turn; then the prune must stop at its next batch.
      setImmediate(() => stop.abort());
      const options = { now, retentionDays: RETENTION_DAYS, batchSize: 2 };
      // At most one batch before the stop (none when the engine's I/O already let the abort in).
      const stopped = await pruneExpired(database(), { ...options, signal: stop.signal });
      expect(stopped.deliveries).toBeLessThanOrEqual(2);
      expect(stopped.boxes).toBe(0);
      expect(await pruneExpired(database(), options)).toMatchObject({ deliveries: 6 - stopped.deliveries, boxes: 6 });
    });

    // SQLite only (PostgreSQL has no per-connection synchronous pragma): not defined for PostgreSQL, so never a skip.
    if (engine.name === 'sqlite') it('commits its batches unsynced and leaves the connection at synchronous=FULL for the deliveries', async () => {
      const now = t.clock.now();
      t.clock.set(now - (RETENTION_DAYS + 1) * DAY_MS);
      for (let i = 0; i < 3; i++) await t.post({ boxId: `bx_${i}` });
      await logRead();
      t.clock.set(now);
      const opened = database();
      if (opened.dialect !== 'sqlite') throw new Error('SQLite only');
      expect(await pruneExpired(opened, { now, retentionDays: RETENTION_DAYS, batchSize: 2 })).toMatchObject({ deliveries: 3 });
      expect(opened.sqlite.pragma('synchronous', { simple: true })).toBe(2);
    });
  });
}
