import { Migrator, sql } from 'kysely';
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { migrations } from '../migrations/index.js';
import { createFanoutStore } from '../src/store/fanout-store.js';
import { queueResend } from '../src/store/exceptions/resend.js';
import { openDatabase } from '../src/store/engines/database.js';
import { openMigrated } from '../src/store/engines/migrate.js';
import { PARTS } from '../src/store/log/position.js';
import { unnumberedFor } from '../src/store/log/sequencer.js';
import { openStore, type Store } from '../src/store/store.js';
import { engines, postgresSchema } from './support/databases.js';
import { recordEvent, storeUnnumbered, waitFor, addRowsAsHolder } from './support/fanout.js';

const T0 = Date.UTC(2026, 10, 26, 10, 0, 0);

const stores: Store[] = [];
afterEach(async () => {
  for (const store of stores.splice(0)) await store.close();
});
async function open(url: string): Promise<Store> {
  const store = await openStore({ url, sequenceIntervalMs: 60_000 });
  stores.push(store);
  return store;
}

/** Reads a sink's whole log from `after` in pages of `limit`, as a lane holding every partition does. */
async function readAll(store: Store, sink: string, after = 0, limit = 3): Promise<{ ids: string[]; end: number }> {
  const outbox = createFanoutStore(store.database);
  const ids: string[] = [];
  let seq = after;
  for (;;) {
    const page = await outbox.log.read({ sink, parts: [...PARTS], after: { seq }, limit });
    ids.push(...page.entries.map((e) => e.id));
    if (page.seenUpTo.seq === seq) return { ids, end: seq };
    seq = page.seenUpTo.seq;
  }
}

describe.each(engines)('log positions on $name', (engine) => {
  it('are given in commit order, each once, whatever the order of arrival, and reads see each entry once', async () => {
    const store = await open(await engine.url());
    // Arrival times out of order, and some in one group commit.
    const ids = await Promise.all([T0 + 50, T0 + 10, T0 + 30].map((receivedAt) => recordEvent(store, { receivedAt, sinks: ['h'] })));
    ids.push(await recordEvent(store, { receivedAt: T0 + 5, sinks: ['h', 'other'] }));
    ids.push(await recordEvent(store, { receivedAt: T0 + 60, sinks: ['other'] }));
    await store.sequenceLog();
    const positions = await store.database.kysely.selectFrom('deliveries').select(['id', 'seq']).orderBy('seq').execute();
    expect(new Set(positions.map((p) => Number(p.seq))).size).toBe(5);
    // The last commit (the fifth) has the last position.
    expect(positions[4]!.id).toBe(ids[4]);

    const { ids: read } = await readAll(store, 'h');
    expect(read.sort()).toEqual(ids.slice(0, 4).sort());
    expect((await readAll(store, 'other')).ids.sort()).toEqual(ids.slice(3).sort());
  });

  it("keep the order one box's events were stored in, also within one millisecond", async () => {
    const store = await open(await engine.url());
    const ids: string[] = [];
    for (let i = 0; i < 6; i++) ids.push(await recordEvent(store, { receivedAt: T0, boxId: 'bx_same', sinks: ['h'] }));
    await store.sequenceLog();
    expect((await readAll(store, 'h')).ids).toEqual(ids);
  });

  it('skip an entry that already has an outbox row of the sink, and keep one open row per event and sink', async () => {
    const store = await open(await engine.url());
    const outbox = createFanoutStore(store.database);
    const [a, b] = [await recordEvent(store, { receivedAt: T0, sinks: ['h'] }), await recordEvent(store, { receivedAt: T0 + 1, sinks: ['h'] })];
    await store.sequenceLog();
    // Written down before a crash stopped the cursor from being stored: the entry is not sent again from the log.
    const row = { deliveryId: a, sink: 'h', status: 'pending' as const, attempts: 1, nextAttemptAt: T0, lastError: 'http_503', boxId: null, traceparent: null, now: T0 };
    await addRowsAsHolder(store.database, outbox, [row]);
    await addRowsAsHolder(store.database, outbox, [row]);
    expect((await readAll(store, 'h')).ids).toEqual([b]);
    const rows = await store.database.kysely.selectFrom('outbox').select('id').where('delivery_id', '=', a).where('status', '=', 'pending').execute();
    expect(rows).toHaveLength(1);
    // A resend of an event still waiting makes that row due now with a fresh budget, rather than a second row.
    expect(await queueResend(store.database, { eventId: a, sink: 'h', now: T0 + 5 })).toBe(1);
    const resent = await store.database.kysely.selectFrom('outbox').select(['attempts', 'next_attempt_at']).where('delivery_id', '=', a).where('status', '=', 'pending').execute();
    expect(resent.map((r) => [r.attempts, Number(r.next_attempt_at)])).toEqual([[0, T0 + 5]]);
  });
});

describe('log positions on PostgreSQL beside other transactions', () => {
  it('number what commits, skip nothing a late commit adds, and never wait for a transaction held open', async () => {
    const url = await postgresSchema();
    const store = await open(url);
    const other = new pg.Client(url);
    await other.connect();
    try {
      // Another client stores a delivery (arrived first) in a transaction it holds open.
      await other.query('BEGIN');
      await storeUnnumbered(other, { id: 'evt_late', boxId: 'bx_late', receivedAt: T0 - 1000 });
      const first = [await recordEvent(store, { receivedAt: T0, sinks: ['h'] }), await recordEvent(store, { receivedAt: T0 + 1, sinks: ['h'] })];
      await store.sequenceLog();
      const before = await readAll(store, 'h');
      expect(before.ids.sort()).toEqual(first.sort());

      await other.query('COMMIT');
      // Committed late: numbered after what a reader has passed, so the reader gets it.
      await store.sequenceLog();
      expect((await readAll(store, 'h', before.end)).ids).toEqual(['evt_late']);
    } finally {
      await other.end();
    }
  });

  it('number a row another client holds locked once it lets go, and the rest meanwhile', async () => {
    const url = await postgresSchema();
    const store = await open(url);
    const other = new pg.Client(url);
    await other.connect();
    try {
      // Stored by another process (committed, not numbered yet), then locked by a client.
      await storeUnnumbered(other, { id: 'evt_locked', boxId: 'bx_locked', receivedAt: T0 - 90_000 });
      // How long it has waited (by the clock that stamped it) shows (boxrelay_log_unnumbered_seconds) until it is numbered.
      expect(await unnumberedFor(store.database, T0)).toBe(90_000);
      await other.query('BEGIN');
      await other.query(`SELECT id FROM deliveries WHERE id = 'evt_locked' FOR UPDATE`);
      const free = await recordEvent(store, { receivedAt: T0 + 1, sinks: ['h'] });
      await store.sequenceLog();
      expect((await readAll(store, 'h')).ids).toEqual([free]);
      await other.query('ROLLBACK');
      await store.sequenceLog();
      expect((await readAll(store, 'h')).ids.sort()).toEqual(['evt_locked', free].sort());
      expect(await unnumberedFor(store.database, T0)).toBe(0);
    } finally {
      await other.end();
    }
  });

  it('a store numbers its own commits at once and wakes the fan-out', async () => {
    const url = await postgresSchema();
    let woken = 0;
    const store = await openStore({ url, onCommit: () => woken++ });
    stores.push(store);
    const id = await recordEvent(store, { receivedAt: T0, sinks: ['h'] });
    await waitFor(() => woken > 0, 'the fan-out to be woken');
    expect((await readAll(store, 'h')).ids).toEqual([id]);
  });
});

describe('migration 013 on PostgreSQL', () => {
  it('renumbers the positions of transaction ids in their order, and each cursor and mark to the last delivery at or before it', async () => {
    const url = await postgresSchema();
    const before = openDatabase({ url });
    try {
      const schema = (await sql<{ s: string }>`SELECT current_schema() AS s`.execute(before.kysely)).rows[0]!.s;
      const migrator = new Migrator({ db: before.kysely, provider: { getMigrations: async () => migrations }, migrationTableSchema: schema });
      expect((await migrator.migrateTo('012_delivery_log')).error).toBeUndefined();
      // Positions (log_xid, seq) as transactions left them: seq from one sequence, committed out of order.
      const positions: [string, number, number][] = [
        ['evt_a', 700, 3],
        ['evt_b', 700, 5],
        ['evt_c', 701, 1],
        ['evt_d', 703, 2],
        ['evt_e', 703, 9],
      ];
      for (const [id, xid, seq] of positions) {
        await sql`INSERT INTO deliveries (id, type, box_id, created_at, received_at, attempt, payload, seq, log_xid, part, sinks)
          VALUES (${id}, 'box.ready', 'bx_1', '2026-11-26T10:00:00.000Z', ${T0}, 1, '{}', ${seq}, ${xid}, 0, 'h')`.execute(before.kysely);
      }
      // Before the log: no position, no routing.
      await sql`INSERT INTO deliveries (id, type, box_id, created_at, received_at, attempt, payload, part, log_xid, seq)
        VALUES ('evt_old', 'box.ready', 'bx_1', '2026-11-26T10:00:00.000Z', ${T0}, 1, '{}', 0, 0, NULL)`.execute(before.kysely);
      const cursors: [number, number, number][] = [
        [0, 701, 1], // on evt_c
        [1, 701, 4], // between evt_c and evt_d
        [2, 0, 0], // the start
        [3, 999, Number.MAX_SAFE_INTEGER], // the head, as a new sink's cursors were made
      ];
      for (const [part, xid, seq] of cursors) {
        await sql`INSERT INTO log_cursors (sink, part, xid, seq, updated_at) VALUES ('h', ${part}, ${xid}, ${seq}, ${T0})`.execute(before.kysely);
      }
      await sql`INSERT INTO log_marks (sink, part, xid, seq, at) VALUES ('h', 0, 700, 5, ${T0})`.execute(before.kysely);
    } finally {
      await before.close();
    }

    const { database } = await openMigrated({ url });
    try {
      const db = database.kysely;
      const renumbered = await db.selectFrom('deliveries').select(['id', 'seq']).orderBy('id').execute();
      expect(renumbered.map((d) => [d.id, d.seq === null ? null : Number(d.seq)])).toEqual([
        ['evt_a', 1],
        ['evt_b', 2],
        ['evt_c', 3],
        ['evt_d', 4],
        ['evt_e', 5],
        ['evt_old', null],
      ]);
      const moved = await db.selectFrom('log_cursors').select(['part', 'seq']).orderBy('part').execute();
      expect(moved.map((c) => [c.part, Number(c.seq)])).toEqual([
        [0, 3],
        [1, 3],
        [2, 0],
        [3, 5],
      ]);
      const [mark] = await db.selectFrom('log_marks').select('seq').execute();
      expect(Number(mark!.seq)).toBe(2);
      // The next delivery is numbered after them; the one from before the log never is.
      const store = await open(url);
      const next = await recordEvent(store, { receivedAt: T0 + 1, sinks: ['h'] });
      await store.sequenceLog();
      const { seq } = await db.selectFrom('deliveries').select('seq').where('id', '=', next).executeTakeFirstOrThrow();
      expect(Number(seq)).toBe(6);
    } finally {
      await database.close();
    }
  });
});
