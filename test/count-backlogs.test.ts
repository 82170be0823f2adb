import { sql, type KyselyPlugin } from 'kysely';
import { afterEach, describe, expect, it } from 'vitest';
import { createBacklogCount, followSettledRows, type Backlogs } from '../src/store/log/count-backlogs.js';
import type { Database } from '../src/store/engines/database.js';
import { createFanoutStore, type FanoutStore } from '../src/store/fanout-store.js';
import { pruneExpired } from '../src/store/retention/prune.js';
import { openStore, type Store } from '../src/store/store.js';
import { DAY_MS } from '../src/clock.js';
import pg from 'pg';
import { engines, postgresSchema } from './support/databases.js';
import { backlogsByDefinition, recordEvent, waitFor, addRowsAsHolder } from './support/fanout.js';

const T0 = Date.UTC(2026, 10, 25, 10, 0, 0);
const ROUTES = [['nats'], ['nats', 'h'], ['h']];

/** The same database, counting the statements run through its Kysely instance. */
function countingStatements(database: Database): { database: Database; statements: () => number } {
  let statements = 0;
  const counter: KyselyPlugin = {
    transformQuery: ({ node }) => (statements++, node),
    transformResult: async ({ result }) => result,
  };
  return { database: { ...database, kysely: database.kysely.withPlugin(counter) }, statements: () => statements };
}

const bySink = (backlogs: Backlogs) => Object.fromEntries(backlogs.map((b) => [b.sink, b.backlog]));

async function record(store: Store, from: number, count: number, routes = ROUTES): Promise<void> {
  for (let i = from; i < from + count; i++) await recordEvent(store, { receivedAt: T0 + i, boxId: `bx_${i % 37}`, sinks: routes[i % routes.length]! });
}

/** Each sink's stored cursors, moved to the `n`th entry of the partitions `parts` picks (those it has). */
async function moveCursors(store: Store, fanout: FanoutStore, sink: string, n: number, parts: (part: number) => boolean): Promise<void> {
  const entries = await store.database.kysely
    .selectFrom('log_cursors as c')
    .innerJoin('deliveries as d', (join) => join.onRef('d.part', '=', 'c.part').on(sql<boolean>`d.seq > c.seq`))
    .select(['d.part', 'd.seq'])
    .where('c.sink', '=', sink)
    .where(sql<boolean>`(',' || d.sinks || ',') LIKE ${`%,${sink},%`}`)
    .orderBy('d.seq')
    .execute();
  const cursors = [...new Set(entries.map((e) => e.part))]
    .filter(parts)
    .map((part) => entries.filter((e) => e.part === part))
    .filter((ofPart) => ofPart.length >= n)
    .map((ofPart) => ({ part: ofPart[0]!.part, seq: Number(ofPart[n - 1]!.seq) }));
  const { held } = await fanout.log.acquireParts({ sink, owner: 'a', now: T0, leaseMs: 60_000, readerTtlMs: 60_000, seenEpoch: 0, take: true });
  const epochs = new Map(held.map(({ part, epoch }) => [part, epoch]));
  await fanout.log.advanceCursors({ sink, owner: 'a', now: T0, cursors: cursors.map((cursor) => ({ ...cursor, epoch: epochs.get(cursor.part) ?? -1 })), mark: false });
}

describe.each(engines)('the backlog counts on $name', (engine) => {
  let store: Store | undefined;
  afterEach(async () => {
    await store?.close();
    store = undefined;
  });

  it('count the log past each partition\'s cursor in slices, with turns of the event loop between them', async () => {
    store = await openStore({ url: await engine.migratedUrl() });
    await record(store, 0, 430);
    await store.sequenceLog();

    let turns = 0;
    let counting = true;
    const tick = () => {
      if (!counting) return;
      turns++;
      setImmediate(tick);
    };
    setImmediate(tick);
    const counted = await createBacklogCount(store.database, 100)();
    counting = false;

    expect(bySink(counted)).toEqual(await backlogsByDefinition(store.database));
    // Four full slices for each sink (430 entries from cursors at the start): the thread had its turns between them.
    expect(turns).toBeGreaterThanOrEqual(8);
  });

  it('equal a fresh count after new deliveries, cursor moves, rows written and settled, a replay and retention', async () => {
    store = await openStore({ url: await engine.migratedUrl() });
    const fanout = createFanoutStore(store.database);
    const count = createBacklogCount(store.database, 50);
    const matches = async (step: string) => {
      const expected = await backlogsByDefinition(store!.database);
      expect(bySink(await count()), step).toEqual(expected);
      // The outbox's pending count adds the pending rows to it (its own cache, followed from its own last call).
      const pending: Record<string, number> = Object.fromEntries(Object.entries(expected).filter(([, backlog]) => backlog > 0));
      for (const { sink } of await store!.database.kysely.selectFrom('outbox').select('sink').where('status', '=', 'pending').execute()) pending[sink] = (pending[sink] ?? 0) + 1;
      expect(await fanout.exceptions.countBySink('pending'), step).toEqual(pending);
    };

    await record(store, 0, 300);
    await store.sequenceLog();
    await matches('first count');

    await record(store, 300, 40);
    await matches('new deliveries, not yet numbered on PostgreSQL');
    await store.sequenceLog();
    await matches('new deliveries');

    await moveCursors(store, fanout, 'nats', 10, (part) => part % 2 === 0);
    await moveCursors(store, fanout, 'h', 3, () => true);
    await matches('cursor moves');

    // Rows for the hook's next entries, written down before its cursor's move is stored, then settled.
    const aheadOf = (sink: string, limit: number) =>
      store!.database.kysely
        .selectFrom('deliveries as d')
        .innerJoin('log_cursors as c', (join) => join.onRef('c.part', '=', 'd.part').on('c.sink', '=', sink))
        .select(['d.id'])
        .where(sql<boolean>`d.seq > c.seq AND (',' || d.sinks || ',') LIKE ${`%,${sink},%`}`)
        .orderBy('d.seq')
        .limit(limit)
        .execute();
    const exception = (deliveryId: string, sink: string, status: 'pending' | 'dead') => ({
      deliveryId, sink, status, attempts: 1, nextAttemptAt: T0, lastError: 'http_503', boxId: null, traceparent: null, now: T0,
    });
    await addRowsAsHolder(store.database, fanout, (await aheadOf('h', 30)).map((d) => exception(d.id, 'h', 'pending')));
    await matches('rows written');
    const settle = async (sink: string) => {
      const claimed = await fanout.exceptions.claim({ sink, owner: 'a', now: T0 + 1000, leaseMs: 60_000, limit: 10_000 });
      await fanout.exceptions.markDelivered(claimed.map((row) => ({ id: row.id, version: row.version, attempts: row.attempts + 1, lastError: null, now: T0 + 1000 })));
    };
    await settle('h');
    await matches('rows settled');
    await moveCursors(store, fanout, 'h', 6, () => true);
    await matches('the cursors moved past the rows');

    // As a lane does between two counts: rows for some entries, then the cursors past them.
    const next = await aheadOf('h', 40);
    await addRowsAsHolder(store.database, fanout, next.filter((_d, i) => i % 3 === 0).map((d) => exception(d.id, 'h', 'dead')));
    await moveCursors(store, fanout, 'h', 8, () => true);
    await matches('rows written, and the cursors moved past them');

    // A replay of a window reaching past the cursors: pending rows for entries the log had not yet sent.
    expect(await fanout.exceptions.replay({ since: T0 + 250, now: T0 + 320, sinksFor: () => [], configured: ['nats', 'h'] })).toBe(95);
    await matches('replay');

    // As a restore's rebase would.
    await sql`UPDATE log_cursors SET seq = 0 WHERE sink = 'nats' AND seq = (SELECT MAX(seq) FROM log_cursors WHERE sink = 'nats')`.execute(store.database.kysely);
    await matches('a cursor moved back');

    // Those rows delivered and entries passed since the last count, retention removes them: entries the kept count had counted.
    await settle('h');
    await settle('nats');
    await moveCursors(store, fanout, 'nats', 15, () => true);
    const pruned = await pruneExpired(store.database, { now: T0 + 31 * DAY_MS, retentionDays: 30 });
    expect(pruned.deliveries).toBeGreaterThan(0);
    await matches('retention prune');

    await record(store, 340, 25);
    await store.sequenceLog();
    await moveCursors(store, fanout, 'nats', 20, () => true);
    await matches('more deliveries and moves after all that');
  });

  it('read only the new entries and those the cursors passed on a second count of a large backlog', async () => {
    store = await openStore({ url: await engine.migratedUrl() });
    const fanout = createFanoutStore(store.database);
    await record(store, 0, 1000, [['h']]);
    await store.sequenceLog();
    const { database, statements } = countingStatements(store.database);
    const count = createBacklogCount(database, 50);

    const first = statements();
    expect(bySink(await count())).toEqual({ h: 1000 });
    const whole = statements() - first;
    const unchanged = statements();
    expect(bySink(await count())).toEqual({ h: 1000 });
    // What every count reads whatever changed: the markers, the cursors, the end of the log.
    const overhead = statements() - unchanged;
    // The whole backlog: 20 slices of 50, each found and counted.
    expect(whole).toBeGreaterThanOrEqual(overhead + 40);

    await record(store, 1000, 10, [['h']]);
    await store.sequenceLog();
    const second = statements();
    expect(bySink(await count())).toEqual({ h: 1010 });
    // The new entries fit the open slice at the end of the log.
    expect(statements() - second).toBe(overhead);

    await moveCursors(store, fanout, 'h', 5, () => true);
    const passedTo = Number((await store.database.kysely.selectFrom('log_cursors').select((eb) => eb.fn.max('seq').as('seq')).executeTakeFirstOrThrow()).seq);
    expect(passedTo).toBeLessThan(500);
    const third = statements();
    expect(bySink(await count())).toEqual(await backlogsByDefinition(store.database));
    // Besides those, the entries up to the furthest cursor, each slice found and counted: not the rest of the backlog.
    expect(statements() - third).toBeLessThanOrEqual(overhead + 2 * Math.ceil(passedTo / 50));
  });
});

describe('the backlog count on PostgreSQL, beside writes under way', () => {
  let store: Store | undefined;
  const clients: pg.Client[] = [];
  afterEach(async () => {
    for (const client of clients.splice(0)) await client.end();
    await store?.close();
    store = undefined;
  });

  it('counts beside an outbox write under way without waiting for it or holding up another, and takes off its row, of a lower id than rows committed before it, once it commits', async () => {
    const url = await postgresSchema();
    store = await openStore({ url });
    const fanout = createFanoutStore(store.database);
    await record(store, 0, 60, [['h']]);
    await store.sequenceLog();
    const count = createBacklogCount(store.database, 50);
    expect(bySink(await count())).toEqual({ h: 60 });

    const connect = async () => {
      const client = new pg.Client(url);
      clients.push(client);
      await client.connect();
      return client;
    };
    const [writer, observer] = [await connect(), await connect()];
    const entries = await store.database.kysely.selectFrom('deliveries').select('id').orderBy('seq').execute();
    const openRow = async (deliveryId: string) => {
      await writer.query('BEGIN');
      await writer.query(`INSERT INTO outbox (delivery_id, sink, status, attempts, next_attempt_at, created_at, updated_at) VALUES ($1, 'h', 'dead', 1, 0, 0, 0)`, [deliveryId]);
    };
    const exception = (deliveryId: string) => ({ deliveryId, sink: 'h', status: 'dead' as const, attempts: 1, nextAttemptAt: T0, lastError: 'http_503', boxId: null, traceparent: null, now: T0 });
    const matches = async (step: string) => expect(bySink(await count()), step).toEqual(await backlogsByDefinition(store!.database));

    // The first entry's row takes its id and stays uncommitted; the second's commits with a higher one.
    await openRow(entries[0]!.id);
    await addRowsAsHolder(store.database, fanout, [exception(entries[1]!.id)]);
    // The count, and another outbox write beside it: neither ever waits for a lock on the outbox.
    let counted: Backlogs | undefined;
    let added: number | undefined;
    const counting = count().then((backlogs) => (counted = backlogs));
    const adding = addRowsAsHolder(store.database, fanout, [exception(entries[2]!.id)]).then((written) => (added = written));
    const waited = async () => (await observer.query(`SELECT 1 FROM pg_locks WHERE locktype = 'relation' AND relation = 'outbox'::regclass AND NOT granted`)).rowCount;
    const outcome = await waitFor(async () => (counted && added !== undefined ? 'both done' : (await waited()) ? 'a lock on the outbox waited' : undefined), 'the count and the write');
    expect(outcome).toBe('both done');
    await Promise.all([counting, adding]);
    // The uncommitted row's entry is still to send; the third's row may have committed before or after the count read.
    expect([58, 59]).toContain(bySink(counted!).h);
    await matches('beside the write under way');
    await writer.query('COMMIT');
    await matches('the row of the lower id committed');
    await matches('and counted again');

    // A write that stays open over counts while rows of higher ids commit, then commits.
    const pastCursor = async (limit: number) =>
      store!.database.kysely
        .selectFrom('deliveries as d')
        .innerJoin('log_cursors as c', (join) => join.onRef('c.part', '=', 'd.part'))
        .select('d.id')
        .where(sql<boolean>`d.seq > c.seq AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.delivery_id = d.id)`)
        .orderBy('d.seq')
        .limit(limit)
        .execute();
    const [held, ...later] = await pastCursor(4);
    await openRow(held!.id);
    for (const entry of later) {
      await addRowsAsHolder(store.database, fanout, [exception(entry.id)]);
      await matches('a row committed while one of a lower id is open');
    }
    await writer.query('COMMIT');
    await matches('the open row committed');
    expect(bySink(await count())).toEqual({ h: 53 });

    // Every entry with a row passed: each was taken off once.
    await moveCursors(store, fanout, 'h', 1, () => true);
    await matches('the cursors moved past the rows');
    await record(store, 60, 5, [['h']]);
    await store.sequenceLog();
    await matches('new deliveries');
  });

  it('settles the rows\' ids beside a session that holds the outbox for a vacuum (SHARE UPDATE EXCLUSIVE): it draws no id', async () => {
    const url = await postgresSchema();
    store = await openStore({ url });
    const fanout = createFanoutStore(store.database);
    await record(store, 0, 3, [['h']]);
    await store.sequenceLog();
    const entries = await store.database.kysely.selectFrom('deliveries').select('id').orderBy('seq').execute();
    const exception = (deliveryId: string) => ({ deliveryId, sink: 'h', status: 'dead' as const, attempts: 1, nextAttemptAt: T0, lastError: 'http_503', boxId: null, traceparent: null, now: T0 });
    await addRowsAsHolder(store.database, fanout, [exception(entries[0]!.id)]);
    const vacuum = new pg.Client(url);
    clients.push(vacuum);
    await vacuum.connect();
    // As autovacuum or ANALYZE hold it, for as long as they run.
    await vacuum.query('BEGIN');
    await vacuum.query('LOCK TABLE outbox IN SHARE UPDATE EXCLUSIVE MODE');
    const settled = followSettledRows(store.database);
    const { id } = await store.database.kysely.selectFrom('outbox').select((eb) => eb.fn.max('id').as('id')).executeTakeFirstOrThrow();
    expect(await settled()).toBe(Number(id));
    await addRowsAsHolder(store.database, fanout, [exception(entries[1]!.id)]);
    const { id: next } = await store.database.kysely.selectFrom('outbox').select((eb) => eb.fn.max('id').as('id')).executeTakeFirstOrThrow();
    expect(await settled()).toBe(Number(next));
    await vacuum.query('COMMIT');
  });

  it('settles no id when the outbox\'s id sequence caches more than one per session: ids then commit in any order', async () => {
    const url = await postgresSchema();
    store = await openStore({ url });
    const fanout = createFanoutStore(store.database);
    await record(store, 0, 2, [['h']]);
    await store.sequenceLog();
    const [entry] = await store.database.kysely.selectFrom('deliveries').select('id').orderBy('seq').execute();
    await sql`ALTER SEQUENCE outbox_id_seq CACHE 20`.execute(store.database.kysely);
    await addRowsAsHolder(store.database, fanout, [{ deliveryId: entry!.id, sink: 'h', status: 'dead', attempts: 1, nextAttemptAt: T0, lastError: 'x', boxId: null, traceparent: null, now: T0 }]);
    const settled = followSettledRows(store.database);
    expect(await settled()).toBeUndefined();
    expect(await settled()).toBeUndefined();
    // The counts are still right: every call counts afresh.
    expect(bySink(await createBacklogCount(store.database)())).toEqual(await backlogsByDefinition(store.database));
  });
});
