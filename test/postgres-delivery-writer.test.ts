import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import type { ParsedEvent } from '../src/events/parse-event.js';
import { StorageUnavailableError } from '../src/errors.js';
import type { Database } from '../src/store/engines/database.js';
import { openMigrated } from '../src/store/engines/migrate.js';
import { openStore } from '../src/store/store.js';
import { DELIVERY_COLUMNS, deliveryParams, type NewDelivery } from '../src/store/write/delivery-sql.js';
import { createPostgresDeliveryWriter } from '../src/store/write/postgres-delivery-writer.js';
import { postgresSchema } from './support/databases.js';
import { waitFor } from './support/fanout.js';
import { eventId } from './support/sign.js';

const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close();
});

/** A delivery as the receiver hands it to the store. */
function delivery(id = eventId(), { boxName = 'ci-1', sinks = [] as string[] } = {}): NewDelivery {
  const createdAtIso = '2026-11-21T10:00:01.000Z';
  const event: ParsedEvent = { id, type: 'box.ready', createdAt: createdAtIso, createdAtIso, boxId: `bx_${id}`, boxName, state: 'ready', previousState: 'cloning', payload: JSON.stringify({ id }) };
  return { event, receivedAt: 1000, attempt: 1, sinks };
}

async function migrated(url: string): Promise<Extract<Database, { dialect: 'postgres' }>> {
  const { database } = await openMigrated({ url });
  closers.push(() => database.close());
  if (database.dialect !== 'postgres') throw new Error('a PostgreSQL URL');
  return database;
}

async function client(url: string): Promise<pg.Client> {
  const other = new pg.Client(url);
  await other.connect();
  closers.push(() => other.end());
  return other;
}

/** Each promise's fate once it has one. */
const fates = <T>(answers: Promise<T>[]) => Promise.allSettled(answers);

describe('the PostgreSQL delivery writer', () => {
  it('gives a sink routed to for the first time its cursors on its own connection, not through a pool that is full', async () => {
    const url = await postgresSchema();
    const store = await openStore({ url, poolSize: 1, maxWaiting: 1, timeoutMs: 30_000 });
    closers.push(() => store.close());
    // The pool's one connection is busy and one more query waits for it: the next is refused at once (database_busy).
    let free!: () => void;
    const busy = new Promise<void>((resolve) => (free = resolve));
    let taken!: () => void;
    const connected = new Promise<void>((resolve) => (taken = resolve));
    const holding = store.database.kysely.connection().execute(() => {
      taken();
      return busy;
    });
    await connected;
    const waiting = store.database.kysely.selectFrom('deliveries').select('id').execute();
    try {
      const answer = await store.writer.record(delivery(eventId(), { sinks: ['alerts'] }));
      expect(answer).toEqual({ duplicate: false, payloadDiffers: false });
    } finally {
      free();
      await Promise.all([holding, waiting]);
    }
    const cursors = await store.database.kysely.selectFrom('log_cursors').select('part').where('sink', '=', 'alerts').execute();
    expect(cursors).toHaveLength(16);
  });

  it('answers a delivery it committed duplicate:false even when reading another replica’s copy fails after the commit', async () => {
    const url = await postgresSchema();
    const database = await migrated(url);
    const own = await database.connectOwn('writer');
    const writerPid = (await own.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
    own.release();
    const failures: unknown[] = [];
    const writer = createPostgresDeliveryWriter({ database, onFailure: (error) => failures.push(error) });
    const replica = await client(url);
    const locker = await client(url);
    const observer = await client(url);
    const waitingOnLock = (pid: number, query: string) =>
      waitFor(async () => {
        const { rows } = await observer.query(`SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock' AND query LIKE $2`, [pid, `${query}%`]);
        return rows.length > 0 || undefined;
      }, `backend ${pid} to wait on a lock in ${query}`);

    // Another replica is storing the same id: its transaction is open.
    const copy = delivery();
    await replica.query('BEGIN');
    const params = deliveryParams(copy);
    await replica.query(`INSERT INTO deliveries (${DELIVERY_COLUMNS}, arrival) VALUES (${params.map((_, i) => `$${i + 1}`).join(', ')}, 0)`, params);
    const fresh = delivery();
    const answers = fates([writer.record(fresh), writer.record(copy)]);
    await waitingOnLock(writerPid, 'WITH input');
    // A table lock queued behind the writer's statement: granted as that commits, so the writer's next read waits behind it.
    const lockerPid = (await locker.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
    await locker.query('BEGIN');
    const locked = locker.query('LOCK TABLE deliveries IN ACCESS EXCLUSIVE MODE');
    await waitingOnLock(lockerPid, 'LOCK TABLE');
    await replica.query('COMMIT');
    await locked;
    await waitingOnLock(writerPid, 'SELECT id, payload');
    // The writer's connection is lost after its commit, before it could read the other replica's copy.
    await observer.query('SELECT pg_terminate_backend($1)', [writerPid]);
    await locker.query('ROLLBACK');

    const [freshAnswer, copyAnswer] = await answers;
    const stored = await observer.query<{ id: string }>('SELECT id FROM deliveries ORDER BY id');
    expect(stored.rows.map((row) => row.id)).toEqual([fresh.event.id, copy.event.id].sort());
    expect(freshAnswer).toEqual({ status: 'fulfilled', value: { duplicate: false, payloadDiffers: false } });
    expect(copyAnswer).toMatchObject({ status: 'fulfilled', value: { duplicate: true } });
    // The lost connection is still told, as a storage failure.
    expect(failures).toMatchObject([{ code: '57P01' }]);
  });

  it('finds the one delivery whose value the server refuses in a batch of 1,000 in a few statements, and stores the rest', async () => {
    const url = await postgresSchema();
    const database = await migrated(url);
    let statements = 0;
    const counted = new WeakSet<object>();
    const writer = createPostgresDeliveryWriter({
      database,
      connect: async () => {
        const connection = await database.connectOwn('writer');
        if (counted.has(connection)) return connection;
        counted.add(connection);
        const query = connection.query.bind(connection) as (...args: unknown[]) => unknown;
        // Counts what the writer sends the server: each statement.
        connection.query = ((...args: unknown[]) => {
          statements++;
          return query(...args);
        }) as typeof connection.query;
        return connection;
      },
    });
    const batch = Array.from({ length: 1000 }, (_, i) => delivery(eventId(), { boxName: i === 617 ? 'nul\u0000name' : 'ci-1' }));
    const answers = await fates(batch.map((one) => writer.record(one)));
    const refused = answers.flatMap((answer, i) => (answer.status === 'rejected' ? [i] : []));
    expect(refused).toEqual([617]);
    expect((answers[617] as PromiseRejectedResult).reason).toBeInstanceOf(StorageUnavailableError);
    expect(answers.filter((answer) => answer.status === 'fulfilled' && !answer.value.duplicate)).toHaveLength(999);
    const { n } = await database.kysely.selectFrom('deliveries').select((eb) => eb.fn.countAll<string>().as('n')).executeTakeFirstOrThrow();
    expect(Number(n)).toBe(999);
    // Halving the refused part each time: about two statements per halving, not one per delivery.
    expect(statements).toBeLessThanOrEqual(2 * Math.ceil(Math.log2(1000)) + 1);
  });
});
