import { afterEach, describe, expect, it } from 'vitest';
import type { ParsedEvent } from '../src/events/parse-event.js';
import { openStore } from '../src/store/store.js';
import type { NewDelivery } from '../src/store/write/delivery-sql.js';
import { postgresSchema } from './support/databases.js';
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
});
