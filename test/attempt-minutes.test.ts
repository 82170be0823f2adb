import { Kysely, PostgresDialect, sql, SqliteDialect, type CompiledQuery } from 'kysely';
import { afterEach, describe, expect, it } from 'vitest';
import { DAY_MS } from '../src/clock.js';
import { sumPerMinute } from '../src/store/attempts/attempt-minutes.js';
import type { NewAttempt } from '../src/store/attempts/attempt-rows.js';
import { histogramPercentile, LATENCY_BOUNDS_MS, LATENCY_COLUMNS, latencyBucket } from '../src/store/attempts/latency-buckets.js';
import { createAttemptLog } from '../src/store/attempts/record-attempts.js';
import { attemptsPerMinute } from '../src/store/attempts/sink-attempts.js';
import { sinkHealth } from '../src/store/attempts/sink-health.js';
import type { Database } from '../src/store/engines/database.js';
import { openMigrated } from '../src/store/engines/migrate.js';
import { batchPace, deleteExpiredBySink } from '../src/store/retention/batches.js';
import { pruneExpired } from '../src/store/retention/prune.js';
import type { Schema } from '../src/store/schema.js';
import { engines } from './support/databases.js';

const MINUTE = 60_000;
/** A minute's start, UTC. */
const T = Date.UTC(2026, 2, 1, 12, 0, 0);

let n = 0;
function attempt(fields: Partial<NewAttempt> & Pick<NewAttempt, 'at'>): NewAttempt {
  n += 1;
  return { eventId: `evt_${n}`, sink: 'alerts', durationMs: 3, outcome: 'delivered', status: 200, error: null, answered: true, request: null, response: null, ...fields };
}

const times = (count: number, make: (i: number) => NewAttempt): NewAttempt[] => Array.from({ length: count }, (_, i) => make(i));

describe('the latency histogram', () => {
  it('puts a duration in the first bucket whose bound holds it, and answers the nearest rank as its bucket bound, capped by the slowest', () => {
    expect([0, 1, 3, 7, 8, 9, 1001, 60_000, 60_001].map((ms) => LATENCY_COLUMNS[latencyBucket(ms)])).toEqual([
      'le_1',
      'le_1',
      'le_3',
      'le_8',
      'le_8',
      'le_10',
      'le_1200',
      'le_60000',
      'le_inf',
    ]);
    const counts = LATENCY_COLUMNS.map(() => 0);
    counts[latencyBucket(3)] = 90;
    counts[latencyBucket(45)] = 9;
    counts[latencyBucket(90_000)] = 1;
    expect([50, 90, 91, 99, 100].map((p) => histogramPercentile(counts, p, 90_000))).toEqual([3, 3, 50, 50, 90_000]);
    // The slowest answer caps a bound above it.
    expect(histogramPercentile(counts, 99, 41)).toBe(41);
    expect(LATENCY_COLUMNS).toHaveLength(LATENCY_BOUNDS_MS.length + 1);
  });

  it('sums a batch into one row per sink and minute, and one per sink, minute and status', () => {
    const batch = [
      ...times(300, (i) => attempt({ at: T + (i % 3) * MINUTE + i })),
      ...times(30, (i) => attempt({ sink: 'audit', at: T + i, outcome: 'retried', status: null, error: { code: 'timeout', message: 'x' }, answered: false })),
    ];
    const { minutes, statuses } = sumPerMinute(batch);
    expect(minutes.map((m) => [m.sink, m.minute - T, m.delivered, m.retried, m.le_3, m.le_1])).toEqual([
      ['alerts', 0, 100, 0, 100, 0],
      ['alerts', MINUTE, 100, 0, 100, 0],
      ['alerts', 2 * MINUTE, 100, 0, 100, 0],
      ['audit', 0, 0, 30, 0, 0],
    ]);
    expect(statuses.map((s) => [s.sink, s.minute - T, s.status, s.attempts])).toEqual([
      ['alerts', 0, '200', 100],
      ['alerts', MINUTE, '200', 100],
      ['alerts', 2 * MINUTE, '200', 100],
      ['audit', 0, 'timeout', 30],
    ]);
  });
});

describe.each(engines)('per-minute attempt sums on $name', ({ url }) => {
  let database: Database | undefined;
  afterEach(async () => {
    await database?.close();
    database = undefined;
  });

  const open = async () => {
    database = (await openMigrated({ url: await url() })).database;
    return database;
  };

  /** A second Kysely on the same connection (pool) that lists every statement it runs; the database's close ends both. */
  const readerOf = (db: Database, statements: CompiledQuery[]): Kysely<Schema> => {
    const log = (event: { level: string; query: CompiledQuery }) => void (event.level === 'query' && statements.push(event.query));
    return db.dialect === 'sqlite'
        ? new Kysely<Schema>({ dialect: new SqliteDialect({ database: db.sqlite }), log })
      : new Kysely<Schema>({ dialect: new PostgresDialect({ pool: db.pool }), log });
  };

  /**
   * Counts the rows each upsert writes to the sums (an insert, or an update on a conflict), with a
   * trigger of the test's own.
   */
  const countSumWrites = async (db: Database): Promise<() => Promise<number>> => {
    await sql`CREATE TABLE sum_writes (n integer NOT NULL)`.execute(db.kysely);
    if (db.dialect === 'sqlite') {
      await sql`CREATE TRIGGER sum_inserts AFTER INSERT ON attempt_minutes BEGIN INSERT INTO sum_writes VALUES (1); END`.execute(db.kysely);
      await sql`CREATE TRIGGER sum_updates AFTER UPDATE ON attempt_minutes BEGIN INSERT INTO sum_writes VALUES (1); END`.execute(db.kysely);
    } else {
      await sql`CREATE FUNCTION count_sum_write() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN INSERT INTO sum_writes VALUES (1); RETURN NULL; END $$`.execute(
        db.kysely,
      );
      await sql`CREATE TRIGGER sum_writes AFTER INSERT OR UPDATE ON attempt_minutes FOR EACH ROW EXECUTE FUNCTION count_sum_write()`.execute(db.kysely);
    }
    return async () => Number((await sql<{ n: number }>`SELECT count(*) AS n FROM sum_writes`.execute(db.kysely)).rows[0]!.n);
  };

  it('answers health from the sums: counts, statuses, percentiles by bucket; 3 rows for 3 minutes, and the same with the attempts gone', async () => {
    const db = await open();
    const log = createAttemptLog(db);
    // Over three minutes: 96 successes (90 answered in 3 ms, 6 in 45 ms), 3 answers of 503 in 700 ms,
    // one refusal (422) after 70 s and 5 timeouts (no answer).
    const successes = [...times(90, (i) => attempt({ at: T + (i % 3) * MINUTE + i })), ...times(6, (i) => attempt({ at: T + MINUTE + i, durationMs: 45.4 }))];
    await log.recordDelivered(successes.slice(0, 50));
    await log.recordDelivered(successes.slice(50));
    for (const at of [T + 10, T + MINUTE + 10, T + 2 * MINUTE + 10]) {
      await log.recordFailed([attempt({ at, durationMs: 700, outcome: 'retried', status: 503, error: { code: 'http_503', message: 'hook answered 503' } })]);
    }
    await log.recordFailed(
      times(5, (i) => attempt({ at: T + 2 * MINUTE + 20 + i, durationMs: 10_000, outcome: 'retried', status: null, error: { code: 'timeout', message: 'no answer in 10 s' }, answered: false })),
    );
    const refusedAt = T + 2 * MINUTE + 30;
    await log.recordFailed([attempt({ at: refusedAt, durationMs: 70_000, outcome: 'dead_lettered', status: 422, error: { code: 'http_422', message: 'hook answered 422' } })]);
    // Another sink's attempts are not counted.
    await log.countAttempts(times(7, (i) => attempt({ sink: 'audit', at: T + i, outcome: 'retried', status: 500, error: { code: 'http_500', message: 'x' } })));

    const statements: CompiledQuery[] = [];
    const health = () => sinkHealth(readerOf(db, statements), { sink: 'alerts', window: '1h', since: T - 30 * MINUTE });
    const answer = await health();
    expect(answer).toEqual({
      sink: 'alerts',
      window: '1h',
      attempts: 105,
      delivered: 96,
      failed: 9,
      successRate: 96 / 105,
      // Of 100 answered: rank 50 is in 3 ms, rank 95 in (40, 50], rank 99 in (600, 800].
      latencyMs: { p50: 3, p95: 50, p99: 800 },
      statuses: { '200': 96, '503': 3, '422': 1, timeout: 5 },
      lastSuccessAt: new Date(T + 2 * MINUTE + 89).toISOString(),
      lastFailureAt: new Date(refusedAt).toISOString(),
      lastError: 'http_422: hook answered 422',
    });
    // The sink's three minutes: three rows of sums, whatever the attempts in them.
    expect(await db.kysely.selectFrom('attempt_minutes').select('minute').where('sink', '=', 'alerts').execute()).toHaveLength(3);
    // The attempts are read once, for the newest failure, one row.
    const onAttempts = statements.filter((s) => /\bfrom "attempts"/i.test(s.sql));
    expect(onAttempts).toHaveLength(1);
    expect(onAttempts[0]!.sql).toMatch(/limit/i);

    await db.kysely.deleteFrom('attempts').execute();
    expect(await health()).toEqual({ ...answer, lastError: null });

    // The console's chart, from the same sums.
    const chart = await attemptsPerMinute(db.kysely, { sink: 'alerts', since: T - 2 * MINUTE, now: T + 3 * MINUTE });
    expect(chart.map((m) => [m.start, m.delivered, m.retried, m.dead_lettered])).toEqual([
      [new Date(T - 2 * MINUTE).toISOString(), 0, 0, 0],
      [new Date(T - MINUTE).toISOString(), 0, 0, 0],
      [new Date(T).toISOString(), 30, 1, 0],
      [new Date(T + MINUTE).toISOString(), 36, 1, 0],
      [new Date(T + 2 * MINUTE).toISOString(), 30, 6, 1],
      [new Date(T + 3 * MINUTE).toISOString(), 0, 0, 0],
    ]);
    // A window counts the minutes that start in it.
    expect(await sinkHealth(db.kysely, { sink: 'alerts', window: '1h', since: T + 1 })).toMatchObject({ attempts: 74, delivered: 66 });
    expect(await sinkHealth(db.kysely, { sink: 'audit', window: '1h', since: T })).toMatchObject({ attempts: 7, failed: 7, latencyMs: { p50: 3 }, statuses: { '500': 7 } });
  });

  it("numbers a batch's successes on from each event and sink's last attempt, each sink apart", async () => {
    const db = await open();
    const log = createAttemptLog(db);
    await log.recordFailed([attempt({ eventId: 'evt_a', at: T, outcome: 'retried', status: 503, error: { code: 'http_503', message: 'x' } })]);
    await log.recordDelivered([attempt({ eventId: 'evt_a', at: T + 1 }), attempt({ eventId: 'evt_a', sink: 'audit', at: T + 2 }), attempt({ eventId: 'evt_b', at: T + 3 })]);
    await log.recordDelivered([attempt({ eventId: 'evt_a', at: T + 4 })]);
    const rows = await db.kysely.selectFrom('attempts').select(['event_id', 'sink', 'n']).orderBy('at').execute();
    expect(rows.map((r) => [r.event_id, r.sink, Number(r.n)])).toEqual([
      ['evt_a', 'alerts', 1],
      ['evt_a', 'alerts', 2],
      ['evt_a', 'audit', 1],
      ['evt_b', 'alerts', 1],
      ['evt_a', 'alerts', 3],
    ]);
  });

  it('adds a batch to the sums with one upsert per sink and minute, not one per attempt', async () => {
    const db = await open();
    const writes = await countSumWrites(db);
    const log = createAttemptLog(db);
    const batch = (sink: string) => times(120, (i) => attempt({ sink, at: T + (i % 3) * MINUTE + i }));
    await log.recordDelivered([...batch('alerts'), ...batch('audit')]);
    expect(await writes()).toBe(6);
    // A second batch into the same minutes updates those rows, once each.
    await log.countAttempts(batch('alerts'));
    expect(await writes()).toBe(9);
    await log.recordFailed(times(4, (i) => attempt({ at: T + i, outcome: 'retried', status: 503, error: { code: 'http_503', message: 'x' } })));
    expect(await writes()).toBe(10);
    const rows = await db.kysely.selectFrom('attempt_minutes').select(['sink', 'minute', 'delivered', 'retried', 'le_3']).orderBy('sink').orderBy('minute').execute();
    expect(rows.map((r) => [r.sink, Number(r.minute) - T, Number(r.delivered), Number(r.retried), Number(r.le_3)])).toEqual([
      ['alerts', 0, 80, 4, 84],
      ['alerts', MINUTE, 80, 0, 80],
      ['alerts', 2 * MINUTE, 80, 0, 80],
      ['audit', 0, 40, 0, 40],
      ['audit', MINUTE, 40, 0, 40],
      ['audit', 2 * MINUTE, 40, 0, 40],
    ]);
  });

  it('counts the attempts the per-event trim removes; retention removes the sums of expired minutes only', async () => {
    const db = await open();
    const log = createAttemptLog(db);
    // 53 failures of one event: the attempts keep the newest 50, the sums count them all.
    for (const i of Array.from({ length: 53 }, (_, k) => k)) {
      await log.recordFailed([{ ...attempt({ at: T + i, outcome: 'retried', status: 503, error: { code: 'http_503', message: 'x' } }), eventId: 'evt_same' }]);
    }
    expect(await db.kysely.selectFrom('attempts').select('id').execute()).toHaveLength(50);
    expect(await sinkHealth(db.kysely, { sink: 'alerts', window: '1h', since: T })).toMatchObject({ attempts: 53, failed: 53, statuses: { '503': 53 } });

    // Five minutes of two sinks past the retention window, and one within it.
    const old = T - 31 * DAY_MS;
    await log.countAttempts([
      ...times(5, (i) => attempt({ at: old + i * MINUTE })),
      ...times(5, (i) => attempt({ sink: 'audit', at: old + i * MINUTE, status: 500, outcome: 'retried', error: { code: 'http_500', message: 'x' } })),
      attempt({ sink: 'audit', at: T + 2 * MINUTE }),
    ]);
    // Thirty days on, the attempts go with the retention pass, and the sums of their minutes, not younger ones.
    await pruneExpired(db, { now: T + 30 * DAY_MS + MINUTE, retentionDays: 30 });
    expect(await db.kysely.selectFrom('attempts').select('id').execute()).toEqual([]);
    const kept = async (table: 'attempt_minutes' | 'attempt_statuses') =>
      (await db.kysely.selectFrom(table).select(['sink', 'minute']).orderBy('sink').orderBy('minute').execute()).map((r) => [r.sink, Number(r.minute)]);
    expect(await kept('attempt_minutes')).toEqual([['audit', T + 2 * MINUTE]]);
    expect(await kept('attempt_statuses')).toEqual([['audit', T + 2 * MINUTE]]);
  });

  it('prunes the sums older than the cutoff, sink by sink in batches of at most the batch size, and stops when asked', async () => {
    const db = await open();
    const log = createAttemptLog(db);
    await log.countAttempts([...times(5, (i) => attempt({ at: T + i * MINUTE })), ...times(3, (i) => attempt({ sink: 'audit', at: T + i * MINUTE }))]);
    // Each batch a range of at most 2 minutes: 5 + 3 rows of each table, and nothing at or after the cutoff.
    const stop = new AbortController();
    const batches: number[] = [];
    const prune = (table: string, cutoff: number) =>
      deleteExpiredBySink({ database: db, pace: batchPace(2), signal: stop.signal, removed: (rows) => void batches.push(rows) }, table, 'minute', cutoff);
    await prune('attempt_minutes', T + 4 * MINUTE);
    await prune('attempt_statuses', T + 4 * MINUTE);
    expect(batches.reduce((a, b) => a + b, 0)).toBe(2 * (4 + 3));
    expect(Math.max(...batches)).toBeLessThanOrEqual(2);
    expect(await db.kysely.selectFrom('attempt_minutes').select('minute').execute()).toEqual([{ minute: expect.anything() }]);
    stop.abort();
    batches.length = 0;
    await prune('attempt_minutes', T + 10 * MINUTE);
    expect(batches).toEqual([]);
  });
});
