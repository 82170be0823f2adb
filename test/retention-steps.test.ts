import { sql, type Kysely } from 'kysely';
import { afterEach, describe, expect, it } from 'vitest';
import { DAY_MS } from '../src/clock.js';
import type { Database } from '../src/store/engines/database.js';
import { openMigrated } from '../src/store/engines/migrate.js';
import { createFanoutStore } from '../src/store/fanout-store.js';
import { TARGET_BATCH_MS, batchPace } from '../src/store/retention/batches.js';
import { pruneExpired, RETENTION_STEPS } from '../src/store/retention/prune.js';
import type { OutboxStatus, Schema } from '../src/store/schema.js';
import { openStore, type Store } from '../src/store/store.js';
import { engines } from './support/databases.js';
import { recordEvent, recordWork } from './support/fanout.js';
import { captureLogs } from './support/log-capture.js';
import { planOf, spy, type Statement } from './support/statements.js';

const NOW = Date.UTC(2026, 10, 26, 12, 0, 0);
const RETENTION_DAYS = 30;
const OLD = NOW - (RETENTION_DAYS + 1) * DAY_MS;
const BATCH = 3;
/** Rows of each kind past the window: several batches each. */
const EXPIRED = 20;

/** Rows of every kind a pass removes, `EXPIRED` of each past the window and one of each inside it. */
async function seed(db: Kysely<Schema>): Promise<void> {
  const times = [...Array.from({ length: EXPIRED }, (_, i) => OLD + i), NOW - DAY_MS];
  await db.insertInto('audit').values(times.map((at) => ({ at, action: 'resend', target: null, by: 'test', detail: '{}', event_id: null }))).execute();
  await db.insertInto('sink_minutes').values(times.map((minute) => ({ sink: 'h', minute, delivered: 1, failed: 0 }))).execute();
  await db.insertInto('log_marks').values(times.map((at, i) => ({ sink: 'h', part: i % 16, seq: i, at }))).execute();
  await db.insertInto('log_readers').values(times.map((seen_at, i) => ({ sink: 'h', owner: `replica-${i}`, seen_at }))).execute();
  await db
    .insertInto('secrets')
    .values(times.map((at, i) => ({ secret: `secret-${i}`, webhook_id: 'wh_1', created_at: at - DAY_MS, expires_at: at === NOW - DAY_MS ? NOW + DAY_MS : at })))
    .execute();
  // The S3 archive's ledger: written objects of one event each; one past the window not yet written stays, with its event.
  await db.insertInto('archive_objects').values(times.map((at, i) => ({ key: `k${i}`, body: null, created_at: at, written_at: at }))).execute();
  await db.insertInto('archive_items').values(times.map((at, i) => ({ item: `evt_a${i}`, object_key: `k${i}`, created_at: at }))).execute();
  await db.insertInto('archive_objects').values({ key: 'unwritten', body: 'H4sI', created_at: OLD, written_at: null }).execute();
  await db.insertInto('archive_items').values({ item: 'evt_unwritten', object_key: 'unwritten', created_at: OLD }).execute();
  const attempt = { duration_ms: 5, outcome: 'delivered', status: 200, error_code: null, error_message: null, answered: 1, request: null, response: null } as const;
  // Expired attempts of two sinks, and one event and sink resent 70 times (recent): 20 beyond the 50 kept.
  await db
    .insertInto('attempts')
    .values(['h', 'nats'].flatMap((sink) => times.map((at, i) => ({ ...attempt, event_id: `evt_${i}`, sink, n: 1, at }))))
    .execute();
  await db
    .insertInto('attempts')
    .values(Array.from({ length: 50 + EXPIRED }, (_, i) => ({ ...attempt, event_id: 'evt_resent', sink: 'h', n: i + 1, at: NOW - DAY_MS + i })))
    .execute();
}

const countOf = async (db: Kysely<Schema>, table: keyof Schema): Promise<number> =>
  Number((await db.selectFrom(table).select((eb) => eb.fn.countAll<number>().as('n')).executeTakeFirstOrThrow()).n);

const DELETE = /^\s*DELETE\b/i;

describe.each(engines)('retention in steps, on $name', (engine) => {
  let database: Database;
  afterEach(() => database?.close());

  it('removes everything past the window in statements of at most a batch, the event loop turning between them', async () => {
    database = (await openMigrated({ url: await engine.url() })).database;
    await seed(database.kysely);
    const statements: Statement[] = [];

    const result = await pruneExpired(spy(database, statements), { now: NOW, retentionDays: RETENTION_DAYS, batchSize: BATCH });

    const deletes = statements.filter((s) => DELETE.test(s.sql));
    expect(deletes.length).toBeGreaterThanOrEqual((7 * EXPIRED) / BATCH);
    expect(deletes.filter((s) => s.rows > BATCH).map((s) => `${s.rows} rows: ${s.sql}`)).toEqual([]);
    // Between two deletes the event loop ran: a request waiting on the receive path is answered there.
    expect(deletes.slice(1).filter((s, i) => s.turn === deletes[i]!.turn).map((s) => s.sql)).toEqual([]);

    expect(result.failedSteps).toEqual([]);
    expect(result.removed).toMatchObject({
      audit: EXPIRED,
      'sink minutes': EXPIRED,
      attempts: 2 * EXPIRED,
      'attempts beyond 50': EXPIRED,
      'log marks': EXPIRED,
      'log readers': EXPIRED,
      'archive ledger': 2 * EXPIRED,
      'expired secrets': EXPIRED,
    });
    const db = database.kysely;
    for (const table of ['audit', 'sink_minutes', 'log_marks', 'log_readers', 'secrets'] as const) expect(await countOf(db, table), table).toBe(1);
    expect((await db.selectFrom('archive_items').select('item').orderBy('item').execute()).map((row) => row.item)).toEqual([`evt_a${EXPIRED}`, 'evt_unwritten']);
    expect((await db.selectFrom('archive_objects').select('key').orderBy('key').execute()).map((row) => row.key)).toEqual([`k${EXPIRED}`, 'unwritten']);
    // Of the resent event, the newest 50 are kept.
    const resent = await db.selectFrom('attempts').select('n').where('event_id', '=', 'evt_resent').orderBy('n').execute();
    expect(resent.map((a) => a.n)).toEqual(Array.from({ length: 50 }, (_, i) => EXPIRED + i + 1));
    expect(await countOf(db, 'attempts')).toBe(2 + 50);
  });

  // SQLite keeps no statistics, so its plans show what a large table would get; PostgreSQL's depend on the sizes seen.
  if (engine.name === 'sqlite') {
    it('reads attempts, audit and cursor marks through their indexes, never the whole table', async () => {
      database = (await openMigrated({ url: await engine.url() })).database;
      await seed(database.kysely);
      const statements: Statement[] = [];
      await pruneExpired(spy(database, statements), { now: NOW, retentionDays: RETENTION_DAYS, batchSize: BATCH });
      const scans: string[] = [];
      for (const statement of statements.filter((s) => /\b(attempts|audit|log_marks|sink_minutes)\b/.test(s.sql) && !/^\s*PRAGMA/i.test(s.sql))) {
        const plan = await planOf(database, statement);
        if (/\bSCAN (attempts|audit|log_marks|sink_minutes)\b(?! USING)/.test(plan)) scans.push(`${statement.sql}\n  -> ${plan}`);
      }
      expect(scans).toEqual([]);
    });
  }

  /**
   * A long run of deliveries kept for their pending work ahead of settled ones: read a few batches at
   * a time, the event loop turning between reads, not in one statement as long as the run (on SQLite
   * that statement held the receive thread), and exactly the settled ones removed, ties included.
   */
  it('reads a run of kept deliveries a few batches per statement, and removes exactly the settled ones past the window', async () => {
    database = (await openMigrated({ url: await engine.url() })).database;
    const db = database.kysely;
    const KEPT = 400;
    const delivery = (id: string, receivedAt: number, sinks = '', seq: number | null = null) => ({
      id,
      type: 'box.ready',
      box_id: `bx_${id}`,
      created_at: 'x',
      received_at: receivedAt,
      attempt: 1,
      payload: '{}',
      sinks,
      seq,
      part: 0,
    });
    const row = (deliveryId: string, status: OutboxStatus) => ({ delivery_id: deliveryId, sink: 'h', status, attempts: 1, next_attempt_at: OLD, created_at: OLD, updated_at: OLD, box_id: null });
    // Kept, one reason in turn: a retry pending, a dead letter, or a sink's cursor short of it in the log.
    const kept = Array.from({ length: KEPT }, (_, i) => `evt_k${String(i).padStart(4, '0')}`);
    await db.insertInto('deliveries').values(kept.map((id, i) => delivery(id, OLD + i, i % 3 === 2 ? 'h' : '', i % 3 === 2 ? i + 1 : null))).execute();
    await db.insertInto('outbox').values(kept.flatMap((id, i) => (i % 3 === 2 ? [] : [row(id, i % 3 === 0 ? 'pending' : 'dead')]))).execute();
    await db.insertInto('log_cursors').values({ sink: 'h', part: 0, seq: 0, lease_owner: null, lease_until: null, updated_at: OLD }).execute();
    // Settled, after the run: 30 received in one millisecond (with one kept among them), some with settled rows.
    const settled = Array.from({ length: 30 }, (_, i) => `evt_s${String(i).padStart(2, '0')}`);
    await db.insertInto('deliveries').values([...settled.map((id) => delivery(id, OLD + KEPT)), delivery('evt_s15x', OLD + KEPT)]).execute();
    await db.insertInto('outbox').values([row('evt_s03', 'delivered'), row('evt_s04', 'discarded'), row('evt_s15x', 'set_aside')]).execute();
    // Inside the window: stays whatever its state.
    await db.insertInto('deliveries').values(delivery('evt_recent', NOW - DAY_MS)).execute();
    const statements: Statement[] = [];

    const result = await pruneExpired(spy(database, statements), { now: NOW, retentionDays: RETENTION_DAYS, batchSize: BATCH });

    expect(result.removed.deliveries).toBe(settled.length);
    expect((await db.selectFrom('deliveries').select('id').orderBy('id').execute()).map((d) => d.id)).toEqual([...kept, 'evt_recent', 'evt_s15x'].sort());
    expect(await countOf(db, 'outbox')).toBe(KEPT - Math.floor(KEPT / 3) + 1);
    // Each read that checks for pending work covers at most four batches of deliveries, with a turn of the event loop before the next.
    const reads = statements.filter((s) => /^\s*select\b.*\bfrom "deliveries" as "d"/is.test(s.sql) && s.sql.includes('log_cursors'));
    expect(reads.length).toBeGreaterThanOrEqual(KEPT / (4 * BATCH));
    expect(reads.slice(1).filter((s, i) => s.turn === reads[i]!.turn)).toEqual([]);
  });

  it('tries a failed step again, reports a step that fails every time by name, and runs the steps after it', async () => {
    database = (await openMigrated({ url: await engine.url() })).database;
    await seed(database.kysely);
    // The audit's first delete is refused (it then succeeds); every delete of cursor marks is refused.
    if (database.dialect === 'sqlite') {
      let refusals = 0;
      database.sqlite.function('refuse_once', () => (refusals++ === 0 ? 1 : 0));
      database.sqlite.exec(`CREATE TEMP TRIGGER refuse_audit BEFORE DELETE ON audit WHEN refuse_once() BEGIN SELECT RAISE(ABORT, 'audit refused'); END`);
      database.sqlite.exec(`CREATE TRIGGER refuse_marks BEFORE DELETE ON log_marks BEGIN SELECT RAISE(ABORT, 'log marks refused'); END`);
    } else {
      const db = database.kysely;
      await sql`CREATE SEQUENCE audit_refusals`.execute(db);
      await sql`CREATE FUNCTION refuse_audit_once() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN IF nextval('audit_refusals') = 1 THEN RAISE EXCEPTION 'audit refused'; END IF; RETURN NULL; END $$`.execute(db);
      await sql`CREATE TRIGGER refuse_audit BEFORE DELETE ON audit FOR EACH STATEMENT EXECUTE FUNCTION refuse_audit_once()`.execute(db);
      await sql`CREATE FUNCTION refuse_marks() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'log marks refused'; END $$`.execute(db);
      await sql`CREATE TRIGGER refuse_marks BEFORE DELETE ON log_marks FOR EACH STATEMENT EXECUTE FUNCTION refuse_marks()`.execute(db);
    }
    const logs = captureLogs();

    const result = await pruneExpired(database, { now: NOW, retentionDays: RETENTION_DAYS, batchSize: BATCH, logger: logs.logger, retryDelayMs: 0 });

    expect(result.failedSteps).toEqual(['log marks']);
    const db = database.kysely;
    expect(await countOf(db, 'audit')).toBe(1);
    expect(await countOf(db, 'log_marks')).toBe(EXPIRED + 1);
    // The steps after the failed one ran.
    const after = RETENTION_STEPS.slice(RETENTION_STEPS.findIndex((step) => step.name === 'log marks') + 1).map((step) => step.name);
    expect(after).toEqual(['log readers', 'archive ledger', 'expired secrets']);
    expect(result.removed).toMatchObject({ 'log readers': EXPIRED, 'expired secrets': EXPIRED });
    expect(await countOf(db, 'log_readers')).toBe(1);
    expect(result.expiredSecrets).toBe(EXPIRED);

    const entries = logs.entries();
    const retried = entries.filter((e) => e.msg === 'retention step "audit" failed; trying it again');
    expect(retried).toHaveLength(1);
    expect(entries.filter((e) => String(e.msg).startsWith('retention step "log marks" failed; trying it again'))).toHaveLength(2);
    const failed = entries.find((e) => e.level === 50 && e.step === 'log marks');
    expect(failed?.err).toMatchObject({ code: 'retention_step_failed', message: expect.stringMatching(/^retention step "log marks" failed 3 times: .*log marks refused/) });
  });
  it('forgets silent boxes even when their deliveries cannot be removed this run', async () => {
    database = (await openMigrated({ url: await engine.url() })).database;
    const db = database.kysely;
    const boxes = Array.from({ length: 8 }, (_, i) => `bx_${i}`);
    await db.insertInto('boxes').values(boxes.map((id) => ({ id, state: 'ready', last_seen_at: OLD }))).execute();
    // Each box's one event, old and routed to no sink: nothing pending keeps the box.
    await db
      .insertInto('deliveries')
      .values(boxes.map((box, i) => ({ id: `evt_${i}`, type: 'box.ready', box_id: box, created_at: 'x', received_at: OLD, attempt: 1, payload: '{}', sinks: '' })))
      .execute();
    if (database.dialect === 'sqlite') {
      database.sqlite.exec(`CREATE TRIGGER refuse_deliveries BEFORE DELETE ON deliveries BEGIN SELECT RAISE(ABORT, 'deliveries refused'); END`);
    } else {
      await sql`CREATE FUNCTION refuse_deliveries() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'deliveries refused'; END $$`.execute(db);
      await sql`CREATE TRIGGER refuse_deliveries BEFORE DELETE ON deliveries FOR EACH STATEMENT EXECUTE FUNCTION refuse_deliveries()`.execute(db);
    }

    const result = await pruneExpired(database, { now: NOW, retentionDays: RETENTION_DAYS, batchSize: BATCH, retryDelayMs: 0 });

    expect(result).toMatchObject({ failedSteps: ['deliveries'], deliveries: 0, boxes: boxes.length });
    expect(await countOf(db, 'boxes')).toBe(0);
    expect(await countOf(db, 'deliveries')).toBe(boxes.length);
  });
});

describe.each(engines)('setting aside the work of sinks no replica serves, on $name', (engine) => {
  let store: Store;
  afterEach(() => store?.close());

  const T0 = NOW;
  /** A sink's backlog: `count` events in the log routed to it, and as many pending outbox rows. */
  const backlog = async (sink: string, count: number) => {
    for (let i = 0; i < count; i++) {
      await recordEvent(store, { receivedAt: T0 + i, boxId: `bx_${sink}_${i % 4}`, sinks: [sink] });
      await recordWork(store, { receivedAt: T0 + i, boxId: `bx_${sink}_${i % 4}`, sinks: [sink] });
    }
    await store.sequenceLog();
  };

  it('sets aside a backlog larger than a batch in several short steps, every row of it', async () => {
    store = await openStore({ url: await engine.url() });
    await backlog('gone', 10);
    const statements: Statement[] = [];
    const outbox = createFanoutStore(spy(store.database, statements));

    const result = await outbox.exceptions.setAsideUnserved({ configured: [], graceMs: 0, now: T0 + 100, batchSize: BATCH });

    const writes = statements.filter((s) => /^\s*(INSERT INTO outbox|UPDATE "?outbox"?)/i.test(s.sql));
    expect(writes.filter((s) => s.rows > BATCH).map((s) => `${s.rows} rows: ${s.sql}`)).toEqual([]);
    expect(writes.filter((s) => s.rows > 0).length).toBeGreaterThanOrEqual(Math.ceil(20 / BATCH));
    expect(result).toEqual({ setAside: { gone: 20 }, failed: [], more: false });
    const db = store.database.kysely;
    const rows = await db.selectFrom('outbox').select(['status', 'sink']).execute();
    expect(rows.filter((r) => r.status === 'set_aside')).toHaveLength(20);
    // Its cursors passed its log: nothing is left to set aside, and nothing is pending for it.
    expect(await outbox.exceptions.setAsideUnserved({ configured: [], graceMs: 0, now: T0 + 200, batchSize: BATCH })).toEqual({ setAside: {}, failed: [], more: false });
    expect(await outbox.exceptions.countBySink('pending')).toEqual({});
    expect(await outbox.exceptions.countBySink('deadLetters')).toEqual({ gone: 20 });
  });

  it('stops at the step limit, says more is left, and the next calls set aside the rest', async () => {
    store = await openStore({ url: await engine.url() });
    await backlog('gone', 10);
    const outbox = createFanoutStore(store.database);
    const call = () => outbox.exceptions.setAsideUnserved({ configured: [], graceMs: 0, now: T0 + 100, batchSize: BATCH, maxSteps: 1 });

    // One step of its pending rows (a batch) and one of its log (a batch of entries, not all of them its own).
    const first = await call();
    expect(first).toEqual({ setAside: { gone: expect.any(Number) }, failed: [], more: true });
    expect(first.setAside.gone).toBeGreaterThan(BATCH);
    expect(first.setAside.gone).toBeLessThanOrEqual(2 * BATCH);
    let total = first.setAside.gone!;
    for (let calls = 1; ; calls++) {
      expect(calls).toBeLessThan(20);
      const next = await call();
      total += next.setAside.gone ?? 0;
      if (!next.more) break;
    }
    expect(total).toBe(20);
    expect(await outbox.exceptions.countBySink('pending')).toEqual({});
    expect(await outbox.exceptions.countBySink('deadLetters')).toEqual({ gone: 20 });
  });

  it('names the sink and the step that failed, and sets aside the work of the other sinks', async () => {
    store = await openStore({ url: await engine.url() });
    await backlog('a_broken', 5);
    await backlog('b_gone', 5);
    // Rows of a_broken's log are refused (its pending rows, an update, go through).
    const { database } = store;
    if (database.dialect === 'sqlite') {
      database.sqlite.exec(`CREATE TRIGGER refuse_broken BEFORE INSERT ON outbox WHEN NEW.sink = 'a_broken' BEGIN SELECT RAISE(ABORT, 'outbox refused'); END`);
    } else {
      await sql`CREATE FUNCTION refuse_broken() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN IF NEW.sink = 'a_broken' THEN RAISE EXCEPTION 'outbox refused'; END IF; RETURN NEW; END $$`.execute(database.kysely);
      await sql`CREATE TRIGGER refuse_broken BEFORE INSERT ON outbox FOR EACH ROW EXECUTE FUNCTION refuse_broken()`.execute(database.kysely);
    }
    const outbox = createFanoutStore(database);

    const result = await outbox.exceptions.setAsideUnserved({ configured: [], graceMs: 0, now: T0 + 100, batchSize: BATCH });

    expect(result.setAside).toEqual({ a_broken: 5, b_gone: 10 });
    expect(result.failed).toEqual([
      { sink: 'a_broken', step: 'the log past its cursors', message: expect.stringMatching(/^could not set aside the work of sink a_broken \(the log past its cursors\): .*outbox refused/) },
    ]);
    expect(await outbox.exceptions.countBySink('deadLetters')).toEqual({ a_broken: 5, b_gone: 10 });
    expect(await outbox.exceptions.countBySink('pending')).toEqual({ a_broken: 5 });
  });
});

describe('the pace of retention batches', () => {
  it('grows while batches commit quickly, up to the most per batch, and halves after a slow one', () => {
    const pace = batchPace(5000);
    expect(pace.size).toBe(50);
    const sizes: number[] = [];
    for (let batch = 0; batch < 10; batch++) {
      pace.took(3);
      sizes.push(pace.size);
    }
    // The old fixed 50 rows, then a rest of 50 ms, capped a pass at 1,000 rows/s whatever a row cost.
    expect(sizes).toEqual([100, 200, 400, 800, 1600, 3200, 5000, 5000, 5000, 5000]);
    pace.took(45);
    expect(pace.size).toBe(2500);
    pace.took(15);
    expect(pace.size).toBe(2500);
    // Never below the first size: a batch whose fixed cost alone outlasts the target keeps 50 rows.
    for (let batch = 0; batch < 20; batch++) pace.took(1000);
    expect(pace.size).toBe(50);
  });

  it('on PostgreSQL, where a batch holds no lock a delivery waits for, keeps batches of up to 100 ms', () => {
    const pace = batchPace(5000, { targetMs: TARGET_BATCH_MS.postgres });
    pace.took(45);
    expect(pace.size).toBe(100);
    pace.took(80);
    expect(pace.size).toBe(100);
    pace.took(120);
    expect(pace.size).toBe(50);
  });

  it('never takes more than a smaller most per batch, from the first batch on', () => {
    const pace = batchPace(3);
    expect(pace.size).toBe(3);
    pace.took(0);
    expect(pace.size).toBe(3);
  });
});
