// One writer per SQLite file (serving with the fan-out in its worker): the storage thread owns the
// file's only write connection; the main thread's connection and the fan-out worker's (opened over
// its link, as the worker opens it) only read (`PRAGMA query_only`), and every write they make (a
// delivery, a cursor move, an attempt batch, a transaction that reads before it writes, an admin
// write) lands through the storage thread, while a write that would bypass it fails loudly. The
// built store (dist/), as `serve` runs it: the storage thread is its compiled module.
import BetterSqlite3 from 'better-sqlite3';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { parseEvent } from '../src/events/parse-event.js';
import type { NewAttempt } from '../src/store/attempts/attempt-rows.js';
import type { Database } from '../src/store/engines/database.js';
import { partOf } from '../src/store/log/position.js';
import { openMigrated } from '../src/store/engines/migrate.js';
import { createSqliteWriter } from '../src/store/write/sqlite-writer.js';
import { sqliteFile } from './support/databases.js';
import { requireBuild } from './support/process.js';
import { delivery } from './support/sign.js';

beforeAll(requireBuild);

const DIST = join(import.meta.dirname, '..', 'dist', 'src');
/** A module of the build, typed as its source. */
const built = async <M>(path: string): Promise<M> => (await import(join(DIST, path))) as M;

const totalChanges = (database: Database) => (database.dialect === 'sqlite' ? (database.sqlite.prepare('SELECT total_changes() AS n').get() as { n: number }).n : -1);
const queryOnly = (database: Database) => (database.dialect === 'sqlite' ? database.sqlite.pragma('query_only', { simple: true }) : undefined);

function attempt(eventId: string, i: number): NewAttempt {
  return { eventId, sink: 'hook', at: 1_000 + i, durationMs: 3, outcome: 'delivered', status: 200, error: null, answered: true, request: null, response: null };
}

describe('one writer per SQLite file', () => {
  it('the main thread and the fan-out worker only read; a delivery, a cursor move, attempts, a set-aside step and admin writes all land through the storage thread', async () => {
    const { openStore } = await built<typeof import('../src/store/store.js')>('store/store.js');
    const { openLinkedDatabase } = await built<typeof import('../src/store/write/storage-thread.js')>('store/write/storage-thread.js');
    const { createFanoutStore } = await built<typeof import('../src/store/fanout-store.js')>('store/fanout-store.js');
    const { createAttemptLog } = await built<typeof import('../src/store/attempts/record-attempts.js')>('store/attempts/record-attempts.js');
    const { createSinkStates } = await built<typeof import('../src/store/state/sink-state.js')>('store/state/sink-state.js');
    const { setAsideLog } = await built<typeof import('../src/store/log/set-aside.js')>('store/log/set-aside.js');
    const { runTransaction } = await built<typeof import('../src/store/engines/transactions.js')>('store/engines/transactions.js');

    const file = sqliteFile();
    const store = await openStore({ url: file, storageThread: true });
    await store.started();
    const link = store.link!();
    const worker = openLinkedDatabase({ url: file }, link.port);
    const reader = new BetterSqlite3(file, { readonly: true });
    try {
      expect(queryOnly(store.database)).toBe(1);
      expect(queryOnly(worker)).toBe(1);
      const mainChangesBefore = totalChanges(store.database);

      // A delivery (the receive thread's), routed to a hook and to a sink no replica serves.
      const now = Date.now();
      const d = delivery({ timestamp: Math.floor(now / 1000), boxId: 'bx_one' });
      const stored = await store.writer.record({ event: parseEvent(d.body, d.id), receivedAt: now, attempt: 1, sinks: ['hook', 'gone'] });
      expect(stored.duplicate).toBe(false);
      // Visible at once on the other connections (read your writes: answered after the commit).
      const { seq } = await worker.kysely.selectFrom('deliveries').select('seq').where('id', '=', d.id).executeTakeFirstOrThrow();

      // The fan-out worker's writes: partitions taken and a cursor moved, a batch of attempts, a set-aside step (a transaction that reads first).
      const fanout = createFanoutStore(worker);
      const part = partOf('bx_one');
      const { held } = await fanout.log.acquireParts({ sink: 'hook', owner: 'worker-1', now, leaseMs: 30_000, readerTtlMs: 60_000, seenEpoch: 0, take: true });
      expect(held.map((p) => p.part)).toContain(part);
      await fanout.log.advanceCursors({ sink: 'hook', owner: 'worker-1', now, cursors: [{ part, seq: Number(seq), epoch: held.find((p) => p.part === part)!.epoch }], mark: true });
      await createAttemptLog(worker).recordDelivered(Array.from({ length: 500 }, (_, i) => attempt(d.id, i)));
      expect(await setAsideLog(worker, 'gone', now)).toEqual({ changed: 1, done: true });

      // The main thread's admin writes: a pause, audited in the same transaction.
      const audit = { at: now, action: 'pause' as const, target: 'hook', by: '127.0.0.1', detail: {} };
      expect(await createSinkStates(store.database).pause('hook', 'operator', now, audit)).toBe(true);

      const count = (sql: string, ...params: unknown[]) => (reader.prepare(sql).get(...params) as { n: number }).n;
      expect(count('SELECT count(*) AS n FROM deliveries WHERE id = ?', d.id)).toBe(1);
      expect(count('SELECT seq AS n FROM log_cursors WHERE sink = ? AND part = ?', 'hook', part)).toBe(Number(seq));
      expect(count('SELECT count(*) AS n FROM log_marks WHERE sink = ?', 'hook')).toBe(1);
      expect(count('SELECT count(*) AS n FROM attempts WHERE event_id = ?', d.id)).toBe(500);
      expect(count("SELECT count(*) AS n FROM outbox WHERE sink = 'gone' AND status = 'set_aside'")).toBe(1);
      expect(count("SELECT count(*) AS n FROM sink_state WHERE sink = 'hook' AND paused_at IS NOT NULL")).toBe(1);
      expect(count("SELECT count(*) AS n FROM audit WHERE action = 'pause'")).toBe(1);

      // Neither connection changed a row itself: the storage thread wrote all of it.
      expect(totalChanges(store.database)).toBe(mainChangesBefore);
      expect(totalChanges(worker)).toBe(0);
      // A write that bypasses the storage thread fails loudly, a transaction too.
      for (const database of [store.database, worker]) {
        if (database.dialect !== 'sqlite') throw new Error('a SQLite file');
        expect(() => database.sqlite.prepare('DELETE FROM audit').run()).toThrow(expect.objectContaining({ code: 'SQLITE_READONLY' }));
        await expect(runTransaction(database, function* () {})).rejects.toMatchObject({ code: 'not_the_writer' });
      }
    } finally {
      reader.close();
      await worker.close();
      link.port.close();
      await link.drained();
      await store.close();
    }
  });

  it('commits a turn together, each write in a savepoint of its own: one that fails fails alone, and leaves nothing of itself', async () => {
    const { database } = await openMigrated({ url: sqliteFile() });
    if (database.dialect !== 'sqlite') throw new Error('a SQLite file');
    try {
      const writer = createSqliteWriter(database);
      const now = Date.now();
      const d = delivery({ timestamp: Math.floor(now / 1000) });
      const auditRow = { sql: "INSERT INTO audit (at, action, target, by, detail) VALUES (?, 'pause', 'hook', 'test', '{}')", rows: [[now]] };
      // Handed over in one turn: one commit.
      const [stored, failed, written] = await Promise.allSettled([
        writer.record({ event: parseEvent(d.body, d.id), receivedAt: now, attempt: 1, sinks: ['hook'] }),
        writer.write([auditRow, { sql: 'INSERT INTO no_such_table VALUES (1)', rows: [[]] }], 'synced'),
        writer.write([auditRow], 'unsynced'),
      ]);
      expect(stored).toMatchObject({ status: 'fulfilled', value: { duplicate: false } });
      expect(failed).toMatchObject({ status: 'rejected', reason: { code: 'SQLITE_ERROR' } });
      expect(written).toMatchObject({ status: 'fulfilled', value: [{ changed: 1 }] });
      expect(database.sqlite.prepare('SELECT count(*) AS n FROM audit').get()).toEqual({ n: 1 });
      expect(database.sqlite.prepare('SELECT count(*) AS n FROM deliveries').get()).toEqual({ n: 1 });
      // A turn of unsynced writes only leaves the connection at its configured durability.
      await writer.write([auditRow], 'unsynced');
      expect(database.sqlite.pragma('synchronous', { simple: true })).toBe(2);
      await expect(writer.runNamedTransaction('noSuchStep', {})).rejects.toMatchObject({ code: 'no_such_transaction' });
    } finally {
      await database.close();
    }
  });
});
