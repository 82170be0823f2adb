import { afterEach, describe, expect, it } from 'vitest';
import { countBacklogs } from '../src/store/log/count-backlogs.js';
import { createFanoutStore } from '../src/store/fanout-store.js';
import { comparePositions, type Position } from '../src/store/log/position.js';
import { openStore, type Store } from '../src/store/store.js';
import { engines } from './support/databases.js';
import { recordEvent } from './support/fanout.js';

const T0 = Date.UTC(2026, 10, 25, 10, 0, 0);

describe.each(engines)('the backlog counts on $name', (engine) => {
  let store: Store | undefined;
  afterEach(async () => {
    await store?.close();
    store = undefined;
  });

  it('count the log past each partition\'s cursor in slices, exactly, with turns of the event loop between them', async () => {
    store = await openStore({ url: await engine.url() });
    const db = store.database.kysely;
    const outbox = createFanoutStore(store.database);
    const routes = [['nats'], ['nats', 'h'], ['h']];
    for (let i = 0; i < 430; i++) await recordEvent(store, { receivedAt: T0 + i, boxId: `bx_${i % 37}`, sinks: routes[i % 3]! });

    await store.sequenceLog();
    const entries = (await db.selectFrom('deliveries').select(['id', 'part', 'seq', 'sinks']).orderBy('seq').execute()).map((d) => ({
      id: d.id,
      part: d.part,
      position: { seq: Number(d.seq) },
      sinks: (d.sinks ?? '').split(','),
    }));
    // NATS has passed the first ten entries of each even partition; a few of the hook's are written down as exceptions.
    await outbox.log.acquireParts({ sink: 'nats', owner: 'a', now: T0, leaseMs: 60_000, readerTtlMs: 60_000 });
    const moved = [...new Set(entries.map((e) => e.part))].filter((part) => part % 2 === 0).map((part) => ({ part, ...entries.filter((e) => e.part === part)[9]!.position }));
    await outbox.log.advanceCursors({ sink: 'nats', owner: 'a', now: T0, cursors: moved, mark: false });
    const written = entries.filter((e) => e.sinks.includes('h')).filter((_e, i) => i % 17 === 0);
    await outbox.exceptions.addExceptions(written.map((e) => ({ deliveryId: e.id, sink: 'h', status: 'pending' as const, attempts: 1, nextAttemptAt: T0, lastError: 'http_503', boxId: null, traceparent: null, now: T0 })));

    const cursors = await db.selectFrom('log_cursors').select(['sink', 'part', 'seq']).execute();
    const cursorOf = (sink: string, part: number): Position => {
      const c = cursors.find((row) => row.sink === sink && row.part === part)!;
      return { seq: Number(c.seq) };
    };
    const expected = (sink: string) =>
      entries.filter((e) => e.sinks.includes(sink) && comparePositions(e.position, cursorOf(sink, e.part)) > 0 && !(sink === 'h' && written.includes(e))).length;
    expect(expected('nats')).toBeLessThan(287);
    expect(expected('h')).toBe(286 - written.length);

    let turns = 0;
    let counting = true;
    const tick = () => {
      if (!counting) return;
      turns++;
      setImmediate(tick);
    };
    setImmediate(tick);
    const counted = await countBacklogs(store.database, 100);
    counting = false;

    expect(Object.fromEntries(counted.map((c) => [c.sink, c.backlog]))).toEqual({ nats: expected('nats'), h: expected('h') });
    // Five slices for each sink (430 entries from a cursor at the start): the thread had its turns between them.
    expect(turns).toBeGreaterThanOrEqual(8);
    // The outbox's pending count adds the hook's written-down rows to the log past the cursors.
    expect(await outbox.exceptions.countBySink('pending')).toEqual({ nats: expected('nats'), h: expected('h') + written.length });
  });
});
