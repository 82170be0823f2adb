import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { listen } from '../src/http/listen.js';
import type { ParsedEvent } from '../src/events/parse-event.js';
import { getBox } from '../src/store/state/boxes.js';
import { openStore, type Store } from '../src/store/store.js';
import { engines } from './support/databases.js';
import { ownPostgres, type OwnPostgres } from './support/postgres-server.js';
import { testRelay, type TestRelay } from './support/relay.js';
import { delivery, eventId, type Delivery } from './support/sign.js';

/** Contract section 19: a burst this size is queued, never refused, on a healthy store. */
const BURST = 500;

interface Answer {
  id: string;
  status: number;
  body: { ok: boolean; duplicate?: boolean; code?: string };
}

const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close();
});

/** A relay on `database` whose public app listens on a port, as it serves (`send` posts to it). */
async function served(database: string, settings: Record<string, unknown> = {}) {
  const t = await testRelay({ database, hooks: [{ name: 'alerts', url: 'http://127.0.0.1:9/x' }], ...settings });
  closers.push(() => t.close());
  const listening = await listen(t.relay.publicApp, 0, '127.0.0.1');
  closers.push(() => listening.close(0));
  const send = async (d: Delivery): Promise<Answer> => {
    const response = await fetch(`http://127.0.0.1:${listening.port}/webhooks`, { method: 'POST', headers: d.headers, body: d.body });
    return { id: d.id, status: response.status, body: (await response.json()) as Answer['body'] };
  };
  return { t, send };
}

async function storedIds(t: TestRelay): Promise<string[]> {
  const rows = await t.relay.store.database.kysely.selectFrom('deliveries').select('id').execute();
  return rows.map((row) => row.id).sort();
}

for (const engine of engines) {
  describe(`a burst of ${BURST} concurrent deliveries on ${engine.name}`, () => {
    it('answers every one of distinct ids 200 and stores each once', async () => {
      const { t, send } = await served(await engine.migratedUrl());
      // One box for all: its events are written in one statement as one at a time would.
      const sent = Array.from({ length: BURST }, () => delivery({ timestamp: t.clock.seconds }));
      const answers = await Promise.all(sent.map(send));
      expect(answers.filter((a) => a.status !== 200)).toEqual([]);
      expect(answers.every((a) => a.body.duplicate === false)).toBe(true);
      expect(await storedIds(t)).toEqual(sent.map((d) => d.id).sort());
    });

    it('answers every copy of one id 200, exactly one of them not a duplicate, and stores it once', async () => {
      const { t, send } = await served(await engine.migratedUrl());
      const d = delivery({ timestamp: t.clock.seconds });
      const answers = await Promise.all(Array.from({ length: BURST }, () => send(d)));
      expect(answers.filter((a) => a.status !== 200)).toEqual([]);
      expect(answers.filter((a) => a.body.duplicate === false)).toHaveLength(1);
      expect(await storedIds(t)).toEqual([d.id]);
    });
  });
}

/** A stored event of box `boxId`, as the receiver hands it to the store. */
function parsed(id: string, boxId: string | null, overrides: Partial<ParsedEvent> = {}): ParsedEvent {
  const createdAtIso = '2026-11-21T10:00:01.000Z';
  return { id, type: 'box.ready', createdAt: createdAtIso, createdAtIso, boxId, boxName: 'ci-1', state: 'ready', previousState: 'cloning', payload: JSON.stringify({ id }), ...overrides };
}

for (const engine of engines) {
  describe(`the store given ${BURST} deliveries in one turn of the event loop on ${engine.name}`, () => {
    // The receiver's requests reach the writer as fast as they are read: here all at once, so none can come after a commit.
    it('stores each, distinct or all of one id, and refuses none', async () => {
      const store = await openStore({ url: await engine.migratedUrl(), timeoutMs: 30_000 });
      closers.push(() => store.close());
      const record = (event: ParsedEvent) => store.writer.record({ event, receivedAt: 1000, attempt: 1, sinks: ['alerts'] });
      const distinct = await Promise.allSettled(Array.from({ length: BURST }, (_, i) => record(parsed(eventId(), `bx_${i % 7}`))));
      expect(distinct.filter((r) => r.status === 'rejected')).toEqual([]);
      const one = parsed(eventId(), 'bx_one');
      const copies = await Promise.allSettled(Array.from({ length: BURST }, () => record(one)));
      expect(copies.filter((r) => r.status === 'rejected')).toEqual([]);
      expect(copies.filter((r) => r.status === 'fulfilled' && !r.value.duplicate)).toHaveLength(1);
      const { n } = await store.database.kysely.selectFrom('deliveries').select((eb) => eb.fn.countAll<number>().as('n')).executeTakeFirstOrThrow();
      expect(Number(n)).toBe(BURST + 1);
    });
  });
}

describe('a box written by a batch of its events (PostgreSQL) as by one event at a time (SQLite)', () => {
  const BOX = 'bx_fold';
  /** A small generator with a seed, so a failing sequence can be run again. */
  const random = (seed: number) => () => ((seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) / 2 ** 32);

  const eventsOf = (next: () => number, count: number, seconds: readonly number[]): ParsedEvent[] => {
    const pick = <T>(values: readonly T[]): T => values[Math.floor(next() * values.length)] as T;
    return Array.from({ length: count }, () => {
      const hydrated = next() < 0.2;
      const createdAtIso = `2026-11-21T10:00:0${pick(seconds)}.000Z`;
      return parsed(eventId(), BOX, {
        type: hydrated ? 'box.hydrated' : 'box.ready',
        createdAt: createdAtIso,
        createdAtIso,
        boxName: pick([null, 'alpha', 'beta', 'gamma']),
        state: pick(['ready', 'error', 'archived']),
        previousState: pick([null, 'cloning']),
      });
    });
  };

  const boxAfter = async (url: string, stored: ParsedEvent[], batch: ParsedEvent[]) => {
    const store: Store = await openStore({ url });
    try {
      const record = (event: ParsedEvent, receivedAt: number) => store.writer.record({ event, receivedAt, attempt: 1, sinks: [] });
      for (const [i, event] of stored.entries()) await record(event, 1000 + i);
      // One turn of the event loop: on PostgreSQL one statement.
      await Promise.all(batch.map((event, i) => record(event, 2000 + i)));
      return await getBox(store.database.kysely, BOX);
    } finally {
      await store.close();
    }
  };

  it.each(Array.from({ length: 12 }, (_, seed) => seed + 1))('sequence %i', async (seed) => {
    const next = random(seed);
    // Most seeds start from a stored box, often one changed later than some of the batch's events.
    const stored = seed % 4 === 0 ? [] : eventsOf(next, 2, [3, 4, 5]);
    const batch = eventsOf(next, 14, [1, 2, 3, 4, 5]);
    const [sqlite, postgres] = engines;
    expect(await boxAfter(await postgres.url(), stored, batch)).toEqual(await boxAfter(await sqlite.url(), stored, batch));
  });
});

describe('a burst while PostgreSQL stops', () => {
  let server: OwnPostgres;
  beforeAll(async () => {
    server = await ownPostgres();
  });
  afterAll(() => server?.close());

  it('answers 503 storage_unavailable only for what it could not commit, and loses nothing it acknowledged', async () => {
    const { t, send } = await served(server.url, { databaseTimeoutMs: 1000 });
    const healthy = await Promise.all(Array.from({ length: BURST }, () => send(delivery({ timestamp: t.clock.seconds }))));
    expect(healthy.filter((a) => a.status !== 200)).toEqual([]);

    const during = Promise.all(Array.from({ length: BURST }, () => send(delivery({ timestamp: t.clock.seconds }))));
    await server.stop();
    const answers = [...(await during), await send(delivery({ timestamp: t.clock.seconds }))];
    expect(answers.filter((a) => a.status !== 200 && !(a.status === 503 && a.body.code === 'storage_unavailable'))).toEqual([]);
    expect(answers.at(-1)).toMatchObject({ status: 503, body: { code: 'storage_unavailable' } });

    await server.start();
    const stored = new Set(await storedIds(t));
    const acknowledged = [...healthy, ...answers].filter((a) => a.status === 200).map((a) => a.id);
    expect(acknowledged.filter((id) => !stored.has(id))).toEqual([]);
  });
});
