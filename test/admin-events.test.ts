import { describe, expect, it } from 'vitest';
import { adminRelayPerTest } from './support/admin.js';
import { engines } from './support/databases.js';
import type { DeliveryOptions } from './support/sign.js';

interface ListedEvent {
  id: string;
  type: string;
  subject?: string;
  receivedAt: string;
}

for (const engine of engines) {
  describe(`GET /admin/events on ${engine.name}`, () => {
    const s = adminRelayPerTest(engine.url);

    /** Posts an event received at the clock's now; returns its id and receipt time. */
    const receive = async (options: Partial<DeliveryOptions> = {}) => {
      const response = await s.t.post(options);
      expect(response.status).toBe(200);
      return { id: response.deliveryId, receivedAt: s.t.clock.now() };
    };

    /** Follows nextCursor to the end; `between` runs after each page but the last. */
    const walk = async (query: string, between?: (page: number) => Promise<void>) => {
      const pages: ListedEvent[][] = [];
      let cursor: string | null = null;
      do {
        const separator = query === '' ? '' : '&';
        const response = await s.admin.get(`/admin/events?${query}${cursor ? `${separator}cursor=${cursor}` : ''}`);
        expect(response.status, response.text).toBe(200);
        pages.push(response.body.events);
        cursor = response.body.nextCursor;
        if (cursor !== null) await between?.(pages.length);
      } while (cursor !== null);
      return pages;
    };
    const ids = (pages: ListedEvent[][]) => pages.flat().map((e) => e.id);
    const newestFirst = (rows: { id: string; receivedAt: number }[]) =>
      [...rows].sort((a, b) => b.receivedAt - a.receivedAt || (a.id < b.id ? 1 : -1)).map((r) => r.id);

    it('answers each event as its CloudEvent plus receivedAt', async () => {
      const createdAt = '2026-11-21T09:59:58.5+00:00';
      const { id } = await receive({ type: 'box.error', boxId: 'bx_abc', boxName: 'ci-42', previousState: 'running', createdAt });
      const response = await s.admin.get('/admin/events');
      expect(response.body).toEqual({
        ok: true,
        events: [
          {
            specversion: '1.0',
            id,
            source: 'sandbox',
            type: 'box.error',
            subject: 'bx_abc',
            time: createdAt,
            datacontenttype: 'application/json',
            data: { box: { id: 'bx_abc', name: 'ci-42' }, previousState: 'running', state: 'error' },
            boxrelayaccount: 'default',
            account: 'default',
            receivedAt: new Date(s.t.clock.now()).toISOString(),
          },
        ],
        nextCursor: null,
      });
    });

    it('pages newest first with limit, every event once and in order, ties on the same millisecond included', async () => {
      const received: { id: string; receivedAt: number }[] = [];
      for (let i = 0; i < 7; i++) {
        if (i % 3 !== 2) s.t.clock.advance(1000); // some events share their receipt millisecond
        received.push(await receive({ boxId: `bx_${i}` }));
      }
      const pages = await walk('limit=3');
      expect(pages.map((p) => p.length)).toEqual([3, 3, 1]);
      expect(ids(pages)).toEqual(newestFirst(received));
      const times = pages.flat().map((e) => Date.parse(e.receivedAt));
      expect(times).toEqual([...times].sort((a, b) => b - a));
    });

    it('neither repeats nor skips an event when others arrive between pages', async () => {
      const received: { id: string; receivedAt: number }[] = [];
      for (let i = 0; i < 7; i++) {
        s.t.clock.advance(1000);
        received.push(await receive());
      }
      // Page 1 holds the three newest; its cursor is the position of the third newest.
      const cursorTime = received[4]!.receivedAt;
      let late: { id: string; receivedAt: number } | undefined;
      let newer: { id: string; receivedAt: number } | undefined;
      const pages = await walk('limit=3', async (page) => {
        if (page !== 1) return;
        // A newer event: above the first page, so not in this walk (a fresh walk starts with it).
        s.t.clock.set(received.at(-1)!.receivedAt + 5000);
        newer = await receive();
        // An event committed late with an older receipt time: below the cursor, so listed once.
        s.t.clock.set(cursorTime - 500);
        late = await receive();
      });
      const expected = newestFirst([...received, late!]);
      expect(ids(pages)).toEqual(expected);
      expect(new Set(ids(pages)).size).toBe(expected.length);
      expect(ids(pages)).not.toContain(newer!.id);
      expect(ids(await walk('limit=3'))).toEqual(newestFirst([...received, late!, newer!]));
    });

    it('filters by type, boxId and since (inclusive), also combined and across pages', async () => {
      const all: { id: string; receivedAt: number; type: string; boxId: string }[] = [];
      for (const [i, type] of ['box.ready', 'box.error', 'box.ready', 'box.archived', 'box.error', 'box.ready'].entries()) {
        s.t.clock.advance(60_000);
        all.push({ ...(await receive({ type, boxId: i % 2 === 0 ? 'bx_even' : 'bx/odd one' })), type, boxId: i % 2 === 0 ? 'bx_even' : 'bx/odd one' });
      }
      const pick = (keep: (e: (typeof all)[number]) => boolean) => newestFirst(all.filter(keep));
      const since = all[2]!.receivedAt;
      const sinceIso = encodeURIComponent(new Date(since).toISOString());

      expect(ids(await walk('type=box.ready&limit=2'))).toEqual(pick((e) => e.type === 'box.ready'));
      expect(ids(await walk(`boxId=${encodeURIComponent('bx/odd one')}&limit=1`))).toEqual(pick((e) => e.boxId === 'bx/odd one'));
      expect(ids(await walk(`since=${sinceIso}`))).toEqual(pick((e) => e.receivedAt >= since));
      // The same instant written at +02:00.
      const atPlusTwo = encodeURIComponent(new Date(since + 7_200_000).toISOString().replace('Z', '+02:00'));
      expect(ids(await walk(`since=${atPlusTwo}`))).toEqual(pick((e) => e.receivedAt >= since));
      // Without seconds, as /admin/replay and the CLI take it (one reader: src/iso-time.ts).
      expect(ids(await walk(`since=${new Date(since).toISOString().slice(0, 16)}Z`))).toEqual(pick((e) => e.receivedAt >= since));
      for (const refused of ['2026-11-21T10:00:00', '2026-02-30T10:00:00Z', 'yesterday']) {
        const response = await s.admin.get(`/admin/events?since=${refused}`);
        expect([response.status, response.body.code], refused).toEqual([400, 'invalid_request']);
      }
      expect(ids(await walk(`type=box.error&boxId=bx%2Fodd%20one&since=${sinceIso}&limit=1`))).toEqual(
        pick((e) => e.type === 'box.error' && e.boxId === 'bx/odd one' && e.receivedAt >= since),
      );
      expect(ids(await walk('type=box.hydrated'))).toEqual([]);
    });
  });
}
