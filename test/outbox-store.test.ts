import { sql } from 'kysely';
import { afterEach, describe, expect, it } from 'vitest';
import { createSinkRouter } from '../src/sinks/route.js';
import { createFanoutStore, type FanoutStore } from '../src/store/fanout-store.js';
import { SINK_NOT_CONFIGURED } from '../src/store/exceptions/rows.js';
import { openStore, type Store } from '../src/store/store.js';
import { engines } from './support/databases.js';
import { recordEvent, recordWork, addRowsAsHolder } from './support/fanout.js';

const T0 = Date.UTC(2026, 10, 21, 10, 0, 0);
const DB_NOW_MS = sql<number>`(extract(epoch from clock_timestamp()) * 1000)`;
const hooks = [
  { name: 'alerts', url: 'http://127.0.0.1:1/a', events: ['box.error'], format: 'cloudevents' as const, headers: {}, timeoutMs: 1000, maxAttempts: 3, concurrency: 1, ordering: 'none' as const, pauseAfter: 0 },
  { name: 'all', url: 'http://127.0.0.1:1/b', events: ['*'], format: 'cloudevents' as const, headers: {}, timeoutMs: 1000, maxAttempts: 3, concurrency: 1, ordering: 'none' as const, pauseAfter: 0 },
];
const sinksFor = createSinkRouter({ buses: ['nats'], hooks, source: 'sandbox' });

describe.each(engines)('outbox on $name', (engine) => {
  let store: Store;
  let outbox: FanoutStore;

  const open = async () => {
    store = await openStore({ url: await engine.migratedUrl() });
    outbox = createFanoutStore(store.database);
  };
  afterEach(async () => store?.close());

  /** Time passing for leases of `leaseMs`, on either lease clock: their ends move that far into the past. */
  const leasesRunOut = (leaseMs: number) => store.database.kysely.updateTable('outbox').set({ lease_until: sql`lease_until - ${leaseMs}` }).execute();

  const status = async (id: number) =>
    store.database.kysely.selectFrom('outbox').selectAll().where('id', '=', id).executeTakeFirstOrThrow();

  it('claims due rows of one sink in arrival order, leased to one owner at a time', async () => {
    await open();
    const ids = [];
    for (let i = 0; i < 5; i++) ids.push(await recordWork(store, { receivedAt: T0 + i, sinks: ['nats'] }));
    await recordWork(store, { receivedAt: T0 + 10, sinks: ['all'] });

    const first = await outbox.exceptions.claim({ sink: 'nats', owner: 'a', now: T0 + 100, leaseMs: 1000, limit: 3 });
    expect(first.map((r) => r.deliveryId)).toEqual(ids.slice(0, 3));
    expect(first.every((r) => r.sink === 'nats' && r.attempts === 0 && r.payload?.includes(r.deliveryId))).toBe(true);

    const second = await outbox.exceptions.claim({ sink: 'nats', owner: 'b', now: T0 + 100, leaseMs: 1000, limit: 10 });
    expect(second.map((r) => r.deliveryId)).toEqual(ids.slice(3));
    expect(await outbox.exceptions.claim({ sink: 'nats', owner: 'b', now: T0 + 100, leaseMs: 1000, limit: 10 })).toEqual([]);

    // Not yet due: nothing.
    expect(await outbox.exceptions.claim({ sink: 'all', owner: 'a', now: T0 + 9, leaseMs: 1000, limit: 10 })).toEqual([]);
    // Leases end by the lease clock: the injected one on SQLite (one process); on PostgreSQL the
    // database's, so a replica whose own clock runs 10 minutes ahead cannot take a row another holds.
    const skewed = await outbox.exceptions.claim({ sink: 'nats', owner: 'c', now: T0 + 100 + 600_000, leaseMs: 1000, limit: 10 });
    expect(skewed).toHaveLength(engine.name === 'sqlite' ? 5 : 0);
    if (engine.name === 'postgres') {
      const [held] = await store.database.kysely.selectFrom('outbox').select(sql<boolean>`lease_until > ${DB_NOW_MS}`.as('held')).where('sink', '=', 'nats').execute();
      expect(held?.held).toBe(true);
      // A lease that ran out makes the row claimable by someone else.
      await leasesRunOut(1000);
      const expired = await outbox.exceptions.claim({ sink: 'nats', owner: 'c', now: T0 + 100, leaseMs: 1000, limit: 10 });
      expect(expired).toHaveLength(5);
    }
    expect((await status(first[0]!.id)).lease_owner).toBe('c');
  });

  it('answers when a lane should look again, ignoring its own leases', async () => {
    await open();
    await recordWork(store, { receivedAt: T0, sinks: ['nats'] });
    await recordWork(store, { receivedAt: T0 + 50, sinks: ['nats'] });
    expect(await outbox.exceptions.nextDueAt('nats', 'me')).toBe(T0);
    const [row] = await outbox.exceptions.claim({ sink: 'nats', owner: 'me', now: T0 + 10, leaseMs: 1000, limit: 1 });
    expect(await outbox.exceptions.nextDueAt('nats', 'me')).toBe(T0 + 50);
    expect(await outbox.exceptions.nextDueAt('nats', 'other')).toBe(T0 + 50);
    await outbox.exceptions.claim({ sink: 'nats', owner: 'me', now: T0 + 60, leaseMs: 1000, limit: 1 });
    expect(await outbox.exceptions.nextDueAt('nats', 'me')).toBeNull();
    // Another process sees our rows claimable when our leases end (by the lease clock: the database's on PostgreSQL).
    const leaseEnd = Number((await status(row!.id)).lease_until);
    expect(leaseEnd).toBeGreaterThanOrEqual(engine.name === 'sqlite' ? T0 + 10 + 1000 : Date.now() - 60_000);
    expect(await outbox.exceptions.nextDueAt('nats', 'other')).toBe(leaseEnd);
    expect(row).toBeDefined();
    expect(await outbox.exceptions.nextDueAt('alerts', 'me')).toBeNull();
  });

  it('keeps delivered rows with their attempts and last error, records retries and dead letters; only the lease holder settles a retry', async () => {
    await open();
    for (let i = 0; i < 5; i++) await recordWork(store, { receivedAt: T0, sinks: ['alerts'] });
    const [a, b, c, d, e] = await outbox.exceptions.claim({ sink: 'alerts', owner: 'me', now: T0, leaseMs: 1000, limit: 10 });

    await outbox.exceptions.scheduleRetry({ id: e!.id, owner: 'me', version: 0, attempts: 3, lastError: 'http_503', now: T0 + 1 }, T0 + 2);
    await outbox.exceptions.markDelivered([
      { id: a!.id, version: 0, attempts: 1, lastError: null, now: T0 + 5 },
      { id: b!.id, version: 0, attempts: 2, lastError: 'timeout', now: T0 + 5 },
      { id: e!.id, version: 0, attempts: 4, lastError: null, now: T0 + 5 },
    ]);
    const delivered = { status: 'delivered', updated_at: T0 + 5, lease_owner: null, lease_until: null };
    expect(await status(a!.id)).toMatchObject({ ...delivered, attempts: 1, last_error: null });
    expect(await status(b!.id)).toMatchObject({ ...delivered, attempts: 2, last_error: 'timeout' });
    // Delivered on its first attempt of a later claim: the error of the scheduled attempts stays.
    expect(await status(e!.id)).toMatchObject({ ...delivered, attempts: 4, last_error: 'http_503' });
    // A delivered row is no work: it is never claimed again.
    await outbox.exceptions.releaseAll();
    expect(await outbox.exceptions.claim({ sink: 'alerts', owner: 'x', now: T0 + 10_000, leaseMs: 1000, limit: 10 })).toHaveLength(2);
    await outbox.exceptions.releaseAll();
    await outbox.exceptions.claim({ sink: 'alerts', owner: 'me', now: T0, leaseMs: 1000, limit: 10 });

    await outbox.exceptions.scheduleRetry({ id: c!.id, owner: 'someone-else', version: 0, attempts: 2, lastError: 'x', now: T0 }, T0 + 999);
    expect(await status(c!.id)).toMatchObject({ attempts: 0, lease_owner: 'me' });
    await outbox.exceptions.scheduleRetry({ id: c!.id, owner: 'me', version: 0, attempts: 2, lastError: 'http_503', now: T0 + 6 }, T0 + 60_000);
    expect(await status(c!.id)).toMatchObject({
      status: 'pending',
      attempts: 2,
      last_error: 'http_503',
      next_attempt_at: T0 + 60_000,
      lease_owner: null,
      lease_until: null,
    });

    await outbox.exceptions.markDead({ id: d!.id, owner: 'me', version: 0, attempts: 1, lastError: 'http_400', now: T0 + 7 });
    expect(await status(d!.id)).toMatchObject({ status: 'dead', attempts: 1, last_error: 'http_400', updated_at: T0 + 7 });
    expect(await outbox.exceptions.countBySink('pending')).toEqual({ alerts: 1 });
    expect(await outbox.exceptions.countBySink('deadLetters')).toEqual({ alerts: 1 });
  });

  it('releases leases: a stopping owner its own, a dead worker\'s all of its own, SQLite start every one', async () => {
    await open();
    await recordWork(store, { receivedAt: T0, sinks: ['nats', 'all'] });
    const [row] = await outbox.exceptions.claim({ sink: 'nats', owner: 'me', now: T0, leaseMs: 60_000, limit: 1 });
    await outbox.exceptions.release([row!.id], 'other');
    expect((await status(row!.id)).lease_owner).toBe('me');
    await outbox.exceptions.release([row!.id], 'me');
    expect(await status(row!.id)).toMatchObject({ lease_owner: null, lease_until: null, attempts: 0, status: 'pending' });

    await outbox.exceptions.claim({ sink: 'nats', owner: 'a', now: T0, leaseMs: 60_000, limit: 1 });
    await outbox.exceptions.claim({ sink: 'all', owner: 'b', now: T0, leaseMs: 60_000, limit: 1 });
    expect(await outbox.exceptions.releaseAll('a')).toBe(1);
    expect(await outbox.exceptions.claim({ sink: 'all', owner: 'c', now: T0, leaseMs: 60_000, limit: 5 })).toEqual([]);
    await outbox.exceptions.claim({ sink: 'nats', owner: 'a', now: T0, leaseMs: 60_000, limit: 1 });
    expect(await outbox.exceptions.releaseAll()).toBe(2);
    expect(await outbox.exceptions.claim({ sink: 'nats', owner: 'c', now: T0, leaseMs: 60_000, limit: 5 })).toHaveLength(1);
  });

  it('sets aside work of sinks no longer configured, out of the pending counts, and listed as dead letters', async () => {
    await open();
    await recordWork(store, { receivedAt: T0, sinks: ['nats', 'alerts', 'gone'] });
    expect(await outbox.exceptions.setAsideUnserved({ configured: ['nats', 'alerts'], graceMs: 0, now: T0 + 1 })).toEqual({ setAside: { gone: 1 }, failed: [], more: false });
    expect(await outbox.exceptions.countBySink('pending')).toEqual({ nats: 1, alerts: 1 });
    expect(await outbox.exceptions.countBySink('deadLetters')).toEqual({ gone: 1 });
    const [dead] = await outbox.exceptions.listDeadLetters({ limit: 10 });
    expect(dead).toMatchObject({ sink: 'gone', lastError: SINK_NOT_CONFIGURED, failedAt: T0 + 1, attempts: 0 });
    expect((await status(dead!.id)).status).toBe('set_aside');
    // A leased row is its holder's to settle: left alone until the lease ends.
    await outbox.exceptions.claim({ sink: 'nats', owner: 'peer', now: T0 + 2, leaseMs: 1000, limit: 1 });
    expect(await outbox.exceptions.setAsideUnserved({ configured: [], graceMs: 0, now: T0 + 2 })).toEqual({ setAside: { alerts: 1 }, failed: [], more: false });
    await leasesRunOut(1000);
    expect(await outbox.exceptions.setAsideUnserved({ configured: [], graceMs: 0, now: T0 + 3 })).toEqual({ setAside: { nats: 1 }, failed: [], more: false });
    expect(await outbox.exceptions.setAsideUnserved({ configured: [], graceMs: 0, now: T0 + 1003 })).toEqual({ setAside: {}, failed: [], more: false });
    // Set-aside work is retried (once its sink is configured again) and discarded as dead letters are.
    expect(await outbox.exceptions.retryDeadLetters({ sink: 'gone', configured: ['gone'], now: T0 + 2000 })).toBe(1);
    expect(await outbox.exceptions.discardDeadLetters({ sink: 'nats', now: T0 + 2000 })).toBe(1);
    expect(await outbox.exceptions.countBySink('deadLetters')).toEqual({ alerts: 1 });
  });

  it('counts the log past the cursors as pending, and sets aside the log of a sink no longer served', async () => {
    await open();
    // Stored through the write path only: the work is the log past each sink's cursors (at the head before).
    const first = await recordEvent(store, { receivedAt: T0, sinks: ['nats', 'gone'] });
    const second = await recordEvent(store, { receivedAt: T0 + 1, sinks: ['gone'] });
    expect(await outbox.exceptions.countBySink('pending')).toEqual({ nats: 1, gone: 2 });
    // Set aside is what has a position (PostgreSQL numbers just after commit; what comes later is set aside at the next pass).
    await store.sequenceLog();
    // An event with an outbox row for the sink is counted there once, not again from the log.
    await addRowsAsHolder(store.database, outbox, [{ deliveryId: first, sink: 'gone', status: 'dead', attempts: 3, nextAttemptAt: T0, lastError: 'http_500', boxId: null, traceparent: null, now: T0 }]);
    expect(await outbox.exceptions.countBySink('pending')).toEqual({ nats: 1, gone: 1 });

    expect(await outbox.exceptions.setAsideUnserved({ configured: ['nats'], graceMs: 0, now: T0 + 5 })).toEqual({ setAside: { gone: 1 }, failed: [], more: false });
    expect(await outbox.exceptions.countBySink('pending')).toEqual({ nats: 1 });
    const deadLetters = await outbox.exceptions.listDeadLetters({ sink: 'gone', limit: 10 });
    expect(deadLetters.map((d) => [d.eventId, d.lastError])).toEqual([
      [first, 'http_500'],
      [second, SINK_NOT_CONFIGURED],
    ]);
    // The cursors moved past it: nothing more to set aside, and retention may take the events.
    expect(await outbox.exceptions.setAsideUnserved({ configured: ['nats'], graceMs: 0, now: T0 + 6 })).toEqual({ setAside: {}, failed: [], more: false });
  });

  it('lists dead letters by page and sink, retries and discards them', async () => {
    await open();
    for (let i = 0; i < 5; i++) await recordWork(store, { receivedAt: T0 + i, sinks: ['alerts', 'all'] });
    for (const sink of ['alerts', 'all']) {
      for (const row of await outbox.exceptions.claim({ sink, owner: 'me', now: T0 + 10, leaseMs: 1000, limit: 10 })) {
        await outbox.exceptions.markDead({ id: row.id, owner: 'me', version: row.version, attempts: 3, lastError: 'http_500', now: T0 + 20 });
      }
    }
    const page1 = await outbox.exceptions.listDeadLetters({ sink: 'alerts', limit: 3 });
    expect(page1.map((d) => d.sink)).toEqual(['alerts', 'alerts', 'alerts']);
    const page2 = await outbox.exceptions.listDeadLetters({ sink: 'alerts', after: page1.at(-1)!.id, limit: 3 });
    expect(page2).toHaveLength(2);
    expect(new Set([...page1, ...page2].map((d) => d.eventId)).size).toBe(5);
    expect(await outbox.exceptions.listDeadLetters({ limit: 100 })).toHaveLength(10);

    const target = page1[0]!;
    expect(await outbox.exceptions.findDeadLetter(target.id)).toEqual(target);
    expect(await outbox.exceptions.retryDeadLetters({ id: target.id, configured: ['nats'], now: T0 + 30 })).toBe(0);
    expect(await outbox.exceptions.retryDeadLetters({ id: target.id, configured: ['alerts'], now: T0 + 30 })).toBe(1);
    expect(await status(target.id)).toMatchObject({ status: 'pending', attempts: 0, next_attempt_at: T0 + 30 });
    expect(await outbox.exceptions.findDeadLetter(target.id)).toBeUndefined();
    expect(await outbox.exceptions.retryDeadLetters({ id: target.id, configured: ['alerts'], now: T0 + 30 })).toBe(0);

    expect(await outbox.exceptions.discardDeadLetters({ id: page2[0]!.id, now: T0 + 35 })).toBe(1);
    expect(await outbox.exceptions.discardDeadLetters({ id: page2[0]!.id, now: T0 + 35 })).toBe(0);
    // Kept as discarded, with what its attempts did, and never retried.
    expect(await status(page2[0]!.id)).toMatchObject({ status: 'discarded', attempts: 3, last_error: 'http_500', updated_at: T0 + 35 });
    expect(await outbox.exceptions.retryDeadLetters({ sink: 'all', configured: ['alerts', 'all'], now: T0 + 40 })).toBe(5);
    expect(await outbox.exceptions.discardDeadLetters({ now: T0 + 50 })).toBe(3);
    expect(await outbox.exceptions.countBySink('deadLetters')).toEqual({});
    expect(await outbox.exceptions.countBySink('pending')).toEqual({ alerts: 1, all: 5 });
  });

  it("replays deliveries stored before routing was kept to a hook with a filter only if its filter is true, page after page, in accepted order", async () => {
    await open();
    const filtered = createSinkRouter({
      buses: [],
      hooks: [{ ...hooks[1]!, name: 'prod', filter: 'event.data.box.name.startsWith("prod-") && event.source == "sandbox"' }, hooks[0]!],
      source: 'sandbox',
    });
    const prod: string[] = [];
    // More events than one page, three to a millisecond (pages end between equal times).
    for (let i = 0; i < 1100; i++) {
      const name = i % 4 === 0 ? `prod-${i}` : `dev-${i}`;
      const id = await recordWork(store, { receivedAt: T0 + Math.floor(i / 3), type: i % 2 === 0 ? 'box.error' : 'box.ready', boxName: name, sinks: [] });
      if (i % 4 === 0) prod.push(id);
    }
    await store.database.kysely.updateTable('deliveries').set({ sinks: null }).execute();
    expect(filtered(`box.error`, { payload: JSON.stringify({ id: 'x', type: 'box.error', createdAt: new Date(T0).toISOString(), data: { box: { id: 'b', name: 'prod-1' } } }) })).toEqual(['prod', 'alerts']);
    const configured = ['prod', 'alerts'];
    expect(await outbox.exceptions.replay({ since: T0, now: T0 + 5000, sinksFor: filtered, configured, sink: 'prod' })).toBe(prod.length);
    expect(await outbox.exceptions.countBySink('pending')).toEqual({ prod: prod.length });
    const rows = await outbox.exceptions.claim({ sink: 'prod', owner: 'me', now: T0 + 5000, leaseMs: 1000, limit: 1000 });
    expect(rows.map((r) => r.deliveryId)).toEqual(prod);
    // Without `sink`: the unfiltered hook by type, the filtered one by its filter (its pending rows not again).
    expect(await outbox.exceptions.replay({ since: T0, now: T0 + 5000, sinksFor: filtered, configured })).toBe(550);
  });
});
