import { describe, expect, it } from 'vitest';
import { adminRelayPerTest } from './support/admin.js';
import { engines } from './support/databases.js';

for (const engine of engines) {
  describe(`/admin/boxes on ${engine.name}`, () => {
    const s = adminRelayPerTest(engine.url);

    /** Follows nextCursor to the end, from `cursor` when given. */
    const walk = async (query: string, from?: string) => {
      const pages: { id: string; state: string | null }[][] = [];
      let cursor: string | null = from ?? null;
      do {
        const response = await s.admin.get(`/admin/boxes?${query}${cursor ? `&cursor=${cursor}` : ''}`);
        expect(response.status, response.text).toBe(200);
        pages.push(response.body.boxes);
        cursor = response.body.nextCursor;
      } while (cursor !== null);
      return pages;
    };

    it('answers one box with every Box field, and 404 not_found for an unknown one', async () => {
      const posted = await s.t.post({ type: 'box.error', boxId: 'bx_abc', boxName: 'ci-42', previousState: 'running' });
      s.t.clock.advance(1000);
      await s.t.post({ type: 'box.hydrated', boxId: 'bx_abc' });
      const response = await s.admin.get('/admin/boxes/bx_abc');
      expect(response.status).toBe(200);
      expect(response.body).toEqual({
        ok: true,
        box: {
          id: 'bx_abc',
          account: 'default',
          name: 'ci-42',
          state: 'error',
          previousState: 'running',
          stateChangedAt: new Date(s.t.clock.now() - 1000).toISOString(),
          lastEventId: posted.deliveryId,
          hydratedAt: new Date(s.t.clock.now()).toISOString(),
        },
      });
      const unknown = await s.admin.get('/admin/boxes/bx_nope');
      expect(unknown.status).toBe(404);
      expect(unknown.body).toMatchObject({ ok: false, code: 'not_found' });
    });

    it('answers boxes "." and ".." by their encoded path and by ?id= after an empty segment (which browsers can send); an empty or repeated id is 400', async () => {
      await s.t.post({ boxId: '.', boxName: 'one dot' });
      await s.t.post({ boxId: '../a/b?c#d%', boxName: 'odd' });
      const posted = await s.t.post({ boxId: '..', boxName: 'two dots' });
      const name = async (path: string) => {
        const response = await s.admin.get(path);
        expect(response.status, `${path}: ${response.text}`).toBe(200);
        return response.body.box.name as string;
      };
      expect(await name('/admin/boxes/%2E%2E')).toBe('two dots');
      expect(await name('/admin/boxes/%2e')).toBe('one dot');
      expect(await name('/admin/boxes/?id=..')).toBe('two dots');
      expect(await name('/admin/boxes/?id=.')).toBe('one dot');
      expect(await name(`/admin/boxes/${encodeURIComponent('../a/b?c#d%')}`)).toBe('odd');
      const event = await s.admin.get(`/admin/events/?id=${encodeURIComponent(posted.deliveryId)}`);
      expect([event.status, event.body.event?.id]).toEqual([200, posted.deliveryId]);
      for (const bad of ['/admin/boxes/?id=', '/admin/boxes/?id=a&id=b', '/admin/events/?id=']) {
        const response = await s.admin.get(bad);
        expect([response.status, response.body.code], bad).toEqual([400, 'invalid_request']);
      }
      expect((await s.admin.delete('/admin/boxes/?id=..')).status).toBe(204);
      expect((await s.admin.get('/admin/boxes/%2E%2E')).status).toBe(404);
      expect(await name('/admin/boxes/?id=.')).toBe('one dot');
    });

    it('lists boxes in id order with stable pages, filtered by state', async () => {
      const states = ['ready', 'error', 'ready', 'archived', 'ready', 'running', 'ready'];
      for (const [i, state] of states.entries()) {
        const type = state === 'error' ? 'box.error' : state === 'archived' ? 'box.archived' : 'box.ready';
        await s.t.post({ type, state, boxId: `bx_${i}` });
      }
      const pages = await walk('limit=3');
      expect(pages.map((p) => p.length)).toEqual([3, 3, 1]);
      expect(pages.flat().map((b) => b.id)).toEqual(states.map((_s, i) => `bx_${i}`));

      // A box added behind the cursor is not listed again, one ahead of it is listed once.
      const first = await s.admin.get('/admin/boxes?limit=3');
      await s.t.post({ boxId: 'bx_00' }); // sorts before the cursor (bx_2)
      await s.t.post({ boxId: 'bx_9' });
      const rest = await walk('limit=3', first.body.nextCursor);
      expect([...first.body.boxes, ...rest.flat()].map((b: { id: string }) => b.id)).toEqual([
        'bx_0',
        'bx_1',
        'bx_2',
        'bx_3',
        'bx_4',
        'bx_5',
        'bx_6',
        'bx_9',
      ]);

      const ready = await walk('state=ready&limit=2');
      expect(ready.flat().map((b) => b.id)).toEqual(['bx_0', 'bx_00', 'bx_2', 'bx_4', 'bx_6', 'bx_9']);
      expect(ready.flat().every((b) => b.state === 'ready')).toBe(true);
      expect((await walk('state=error')).flat().map((b) => b.id)).toEqual(['bx_1']);
      expect((await walk('state=provisioning')).flat()).toEqual([]);
    });

    it('forgets a box with DELETE (204, then 404), and a later event starts it afresh', async () => {
      const boxId = 'bx/with space';
      const path = `/admin/boxes/${encodeURIComponent(boxId)}`;
      await s.t.post({ type: 'box.error', boxId });
      expect((await s.admin.get(path)).body.box).toMatchObject({ id: boxId, state: 'error' });

      const forgotten = await s.admin.delete(path);
      expect(forgotten.status).toBe(204);
      expect(forgotten.text).toBe('');
      expect((await s.admin.get(path)).status).toBe(404);
      const again = await s.admin.delete(path);
      expect(again.status).toBe(404);
      expect(again.body).toMatchObject({ ok: false, code: 'not_found' });

      // Forgetting a box keeps its events.
      expect((await s.admin.get(`/admin/events?boxId=${encodeURIComponent(boxId)}`)).body.events).toHaveLength(1);
      s.t.clock.advance(1000);
      await s.t.post({ type: 'box.ready', boxId });
      expect((await s.admin.get(path)).body.box).toMatchObject({ id: boxId, state: 'ready' });
    });
  });
}
