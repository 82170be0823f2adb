import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import { openMigrated } from '../src/store/engines/migrate.js';
import { createFanoutStore } from '../src/store/fanout-store.js';
import { openStore } from '../src/store/store.js';
import { engines } from './support/databases.js';
import { recordEvent } from './support/fanout.js';
import { ownPostgres } from './support/postgres-server.js';

/** The partitions of a sink's log are shared fairly among the live processes that read it (contract: replicas). */
describe.each(engines)('log partitions on $name', (engine) => {
  it('gives each live reader its share, takes over what a gone reader held, and never gives one partition to two', async () => {
    const { database } = await openMigrated({ url: await engine.url() });
    try {
      const outbox = createFanoutStore(database);
      const now = Date.now();
      const acquire = (owner: string) => outbox.log.acquireParts({ sink: 'h', owner, now, leaseMs: 60_000, readerTtlMs: 60_000, seenEpoch: 0, take: true });

      const first = await acquire('a');
      expect([first.held.length, first.share]).toEqual([16, 16]);
      // A second reader: its share is half, but nothing is free until the first gives back its surplus.
      const second = await acquire('b');
      expect([second.held.length, second.share]).toEqual([0, 8]);
      const again = await acquire('a');
      expect([again.held.length, again.share]).toEqual([16, 8]);
      await outbox.log.releaseParts({ sink: 'h', owner: 'a', parts: again.held.slice(8).map((p) => p.part) });
      const shared = await acquire('b');
      expect(shared.held.map((p) => p.part)).toEqual([8, 9, 10, 11, 12, 13, 14, 15]);
      expect((await acquire('a')).held.map((p) => p.part)).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);

      // The first reader is gone (its worker died): its partitions and its place in the share go at once.
      await outbox.exceptions.releaseAll('a');
      const alone = await acquire('b');
      expect([alone.held.length, alone.share]).toEqual([16, 16]);
    } finally {
      await database.close();
    }
  });

  it('moves a cursor only for the process holding its partition, and notes when when asked', async () => {
    const { database } = await openMigrated({ url: await engine.url() });
    try {
      const outbox = createFanoutStore(database);
      const now = Date.now();
      const { held } = await outbox.log.acquireParts({ sink: 'h', owner: 'a', now, leaseMs: 60_000, readerTtlMs: 60_000, seenEpoch: 0, take: true });
      const start = held[0]!;
      await outbox.log.advanceCursors({ sink: 'h', owner: 'b', now, cursors: [{ part: 0, seq: start.seq + 1, epoch: held[0]!.epoch }], mark: true });
      await outbox.log.advanceCursors({ sink: 'h', owner: 'a', now: now + 5, cursors: [{ part: 1, seq: start.seq + 2, epoch: held[1]!.epoch }], mark: true });
      await outbox.log.advanceCursors({ sink: 'h', owner: 'a', now: now + 9, cursors: [{ part: 2, seq: start.seq + 3, epoch: held[2]!.epoch }], mark: false });
      const cursors = await database.kysely.selectFrom('log_cursors').select(['part', 'seq']).where('part', 'in', [0, 1, 2]).orderBy('part').execute();
      expect(cursors.map((c) => [c.part, Number(c.seq)])).toEqual([
        [0, start.seq],
        [1, start.seq + 2],
        [2, start.seq + 3],
      ]);
      const marks = await database.kysely.selectFrom('log_marks').select(['part', 'at']).execute();
      expect(marks.map((m) => [m.part, Number(m.at)])).toEqual([[1, now + 5]]);
    } finally {
      await database.close();
    }
  });
});

/** Fencing epochs (docs/architecture.md, "Who may act"): a holder's late writes change nothing once another took its partition. */
describe.each(engines)('fencing epochs on $name', (engine) => {
  it('refuse the cursor moves and outbox rows of a holder whose partition was taken since, also once it takes the partition back', async () => {
    const store = await openStore({ url: await engine.url() });
    try {
      const fanout = createFanoutStore(store.database);
      const t0 = Date.now();
      const id = await recordEvent(store, { receivedAt: t0, boxId: 'bx_fenced', sinks: ['h'] });
      const { part, seq } = await store.database.kysely.selectFrom('deliveries').select(['part', 'seq']).where('id', '=', id).executeTakeFirstOrThrow();
      const acquire = (owner: string) =>
        fanout.log.acquireParts({ sink: 'h', owner, now: t0, leaseMs: 60_000, readerTtlMs: 1, seenEpoch: 0, take: true }).then(({ held }) => held.find((h) => h.part === Number(part)));
      // A lease run out (a stall, a stop), on the lease clock of either engine; gone from the readers, so the other's share is every partition.
      const runOut = async (owner: string) => {
        await store.database.kysely.updateTable('log_cursors').set({ lease_until: 0 }).where('lease_owner', '=', owner).execute();
        await fanout.log.leave({ sink: 'h', owner });
      };
      const row = { deliveryId: id, sink: 'h', status: 'pending' as const, attempts: 1, nextAttemptAt: t0, lastError: 'http_503', boxId: 'bx_fenced', traceparent: null, now: t0 };
      const cursorAt = async () => Number((await store.database.kysely.selectFrom('log_cursors').select('seq').where('sink', '=', 'h').where('part', '=', Number(part)).executeTakeFirstOrThrow()).seq);
      const moveAs = (owner: string, epoch: number, to: number) => fanout.log.advanceCursors({ sink: 'h', owner, now: t0, cursors: [{ part: Number(part), seq: to, epoch }], mark: false });

      const a = (await acquire('a'))!;
      const start = await cursorAt();
      // A's lease ran out and B took the partition: a new epoch.
      await runOut('a');
      const b = (await acquire('b'))!;
      expect(b.epoch).toBeGreaterThan(a.epoch);
      await moveAs('a', a.epoch, Number(seq));
      expect(await fanout.exceptions.addExceptions([row], { part: Number(part), owner: 'a', epoch: a.epoch })).toBe(0);
      expect(await cursorAt()).toBe(start);

      // B gives it back and A takes it again: still not A's old holding.
      await fanout.log.releaseParts({ sink: 'h', owner: 'b', parts: [Number(part)] });
      const again = (await acquire('a'))!;
      expect(again.epoch).toBeGreaterThan(b.epoch);
      await moveAs('a', a.epoch, Number(seq));
      expect(await fanout.exceptions.addExceptions([row], { part: Number(part), owner: 'a', epoch: a.epoch })).toBe(0);
      expect(await cursorAt()).toBe(start);
      expect(await store.database.kysely.selectFrom('outbox').select('id').execute()).toEqual([]);

      // Its lease runs out again with no one taking the partition: the holding goes on, and so do its writes.
      await runOut('a');
      const goesOn = (await acquire('a'))!;
      expect(goesOn.epoch).toBe(again.epoch);
      expect(await fanout.exceptions.addExceptions([row], { part: Number(part), owner: 'a', epoch: again.epoch })).toBe(1);
      await moveAs('a', again.epoch, Number(seq));
      expect(await cursorAt()).toBe(Number(seq));
    } finally {
      await store.close();
    }
  });
});

describe('cursor moves on PostgreSQL', () => {
  it('leave the cursors\' table small without a vacuum: each move is an update in place (HOT), pruned as the page is read', async () => {
    // A server of its own, with autovacuum off as an operator may run it: nothing vacuums this table.
    // On a shared server any other client's transaction open meanwhile (another test file's, run
    // beside this one) keeps every version until it ends, however the table is built.
    const server = await ownPostgres({ autovacuum: 'off' });
    const { database } = await openMigrated({ url: server.url }).catch(async (error: unknown) => {
      await server.close();
      throw error;
    });
    try {
      const outbox = createFanoutStore(database);
      const now = Date.now();
      const { held } = await outbox.log.acquireParts({ sink: 'h', owner: 'a', now, leaseMs: 600_000, readerTtlMs: 600_000, seenEpoch: 0, take: true });
      const moves = 2000;
      for (let move = 1; move <= moves; move++) {
        await outbox.log.advanceCursors({ sink: 'h', owner: 'a', now, cursors: held.map(({ part, seq, epoch }) => ({ part, seq: seq + move, epoch })), mark: false });
      }
      const { rows } = await sql<{ bytes: string }>`SELECT pg_relation_size(to_regclass('log_cursors')) AS bytes`.execute(database.kysely);
      // 32,000 row versions of about 80 bytes: some 2.5 MB (320 pages) when each move is a new version left for VACUUM.
      expect(Number(rows[0]!.bytes)).toBeLessThanOrEqual(8 * 8192);
      const cursors = await database.kysely.selectFrom('log_cursors').select('seq').where('sink', '=', 'h').execute();
      expect(new Set(cursors.map((c) => Number(c.seq) - moves))).toEqual(new Set(held.map((h) => h.seq)));
    } finally {
      await database.close();
      await server.close();
    }
  });
});
