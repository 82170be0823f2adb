import { sql } from 'kysely';
import { afterEach, describe, expect, it } from 'vitest';
import type { Database } from '../src/store/engines/database.js';
import { openMigrated } from '../src/store/engines/migrate.js';
import { addRowsAsHolder } from './support/fanout.js';
import { createFanoutStore } from '../src/store/fanout-store.js';
import { pruneExpired } from '../src/store/retention/prune.js';
import { engines } from './support/databases.js';
import { planOf, spy, type Statement } from './support/statements.js';

/** Settled rows kept for the statuses: many, so a statement that reads them all shows in its plan. */
const KEPT = 20_000;

/**
 * Delivered and discarded outbox rows are kept until retention: the work queue's statements
 * (claims, due times, counts, dead letters, set-aside) must still read only the partial indexes of
 * pending work and dead letters, never the whole table, on both engines.
 */
describe.each(engines)('outbox statements with settled rows kept, on $name', (engine) => {
  let database: Database;
  afterEach(() => database?.close());

  it('claim, count and settle through partial indexes and ids, never a scan of the table', async () => {
    database = (await openMigrated({ url: await engine.url() })).database;
    const statements: Statement[] = [];
    const spied = spy(database, statements);
    await sql`INSERT INTO outbox (delivery_id, sink, status, attempts, next_attempt_at, created_at, updated_at)
      SELECT 'evt_' || n, CASE WHEN n % 2 = 0 THEN 'h' ELSE 'nats' END, CASE WHEN n % 10 = 0 THEN 'discarded' ELSE 'delivered' END, 1, 0, 0, 0
      FROM (${numbers(engine.name, KEPT)}) AS numbers`.execute(database.kysely);
    // Each with its delivery, received now (the oldest, evt_2, a day and more ago: retention's to remove).
    await sql`INSERT INTO deliveries (id, type, created_at, received_at, payload)
      SELECT 'evt_' || n, 'box.ready', '2026-01-01T00:00:00.000Z', CASE WHEN n = 2 THEN 0 ELSE ${sql.lit(Date.now())} END, '{}'
      FROM (${numbers(engine.name, KEPT)}) AS numbers`.execute(database.kysely);
    await sql`INSERT INTO outbox (delivery_id, sink, status, attempts, next_attempt_at, created_at, updated_at)
      VALUES ('evt_p', 'h', 'pending', 0, 0, 0, 0), ('evt_d', 'h', 'dead', 1, 0, 0, 0), ('evt_g', 'gone', 'pending', 0, 0, 0, 0)`.execute(database.kysely);
    for (const table of ['outbox', 'deliveries']) await sql`ANALYZE ${sql.table(table)}`.execute(database.kysely);

    const outbox = createFanoutStore(spied);
    const now = Date.now();
    const [row] = await outbox.exceptions.claim({ sink: 'h', owner: 'me', now, leaseMs: 1000, limit: 10 });
    await outbox.exceptions.claim({ sink: 'h', owner: 'me', now, leaseMs: 1000, limit: 10, ordered: true });
    await outbox.exceptions.nextDueAt('h', 'me');
    await outbox.exceptions.markDelivered([{ id: row!.id, version: 0, attempts: 1, lastError: null, now }]);
    await outbox.exceptions.scheduleRetry({ id: row!.id, owner: 'me', version: 0, attempts: 1, lastError: 'x', now }, now);
    await outbox.exceptions.markDead({ id: row!.id, owner: 'me', version: 0, attempts: 1, lastError: 'x', now });
    await outbox.exceptions.release([row!.id], 'me');
    await outbox.exceptions.makeDue('h', now);
    await outbox.exceptions.releaseAll('me');
    await outbox.exceptions.releaseAll();
    // The log's backlog count from nothing, then followed: the rows written since are found by id.
    await outbox.log.ensureCursors(['h']);
    await outbox.exceptions.countBySink('pending');
    await addRowsAsHolder(spied, outbox, [{ deliveryId: 'evt_3', sink: 'h', status: 'dead', attempts: 1, nextAttemptAt: now, lastError: 'x', boxId: null, traceparent: null, now }]);
    await outbox.exceptions.countBySink('pending');
    await outbox.exceptions.countBySink('deadLetters');
    await outbox.exceptions.announceServed(['h'], now);
    await outbox.exceptions.setAsideUnserved({ configured: ['h', 'nats'], graceMs: 60_000, now });
    await outbox.exceptions.listDeadLetters({ limit: 10 });
    await outbox.exceptions.listDeadLetters({ sink: 'h', limit: 10 });
    await outbox.exceptions.retryDeadLetters({ sink: 'h', configured: ['h'], now });
    await outbox.exceptions.discardDeadLetters({ sink: 'h', now });
    await outbox.exceptions.rowsOfEvent('evt_p');
    // Retention finds the expired deliveries by time, their rows by delivery.
    expect(await pruneExpired(spied, { now, retentionDays: 1 })).toMatchObject({ deliveries: 1 });

    const scans: string[] = [];
    // A pragma or a table lock has no plan.
    for (const statement of statements.filter((s) => /\boutbox\b/.test(s.sql) && !/^\s*(PRAGMA|LOCK)/i.test(s.sql))) {
      const plan = await planOf(database, statement);
      if (wholeTableRead(engine.name, plan)) scans.push(`${statement.sql}\n  -> ${plan}`);
    }
    expect(scans).toEqual([]);
    expect(statements.length).toBeGreaterThan(18);
    // The check sees a read of every row where there is one.
    expect(wholeTableRead(engine.name, await planOf(database, { sql: `SELECT id FROM outbox WHERE attempts = 1`, parameters: [] }))).toBe(true);
  });
});

/** 1..count as rows of `n`. */
function numbers(engine: 'sqlite' | 'postgres', count: number) {
  return engine === 'postgres'
    ? sql`SELECT generate_series(1, ${sql.lit(count)}) AS n`
    : sql`WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < ${sql.lit(count)}) SELECT n FROM c`;
}

/** A read of every outbox row: a sequential scan (PostgreSQL), or a scan not through a partial index (SQLite). */
function wholeTableRead(engine: 'sqlite' | 'postgres', plan: string): boolean {
  if (engine === 'postgres') return /Seq Scan on outbox/.test(plan);
  return plan.split('; ').some((step) => /^SCAN (outbox|earlier)\b/.test(step) && !/USING (COVERING )?INDEX outbox_(due|open|dead_letters|box_order)\b/.test(step));
}
