import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { getBox } from '../src/store/state/boxes.js';
import { engines } from './support/databases.js';
import { testRelay, type TestRelay } from './support/relay.js';
import { eventId } from './support/sign.js';

interface BoxEvent {
  type?: string;
  box?: Record<string, unknown>;
  state?: string;
  previousState?: string;
  createdAt: string;
}

for (const engine of engines) {
  describe(`box state on ${engine.name}`, () => {
    let t: TestRelay;
    beforeEach(async () => {
      t = await testRelay({ database: await engine.migratedUrl() });
    });
    afterEach(() => t.close());

    /** Posts one signed event with exactly this body (fields absent when not given); returns its id. */
    const post = async ({ type = 'box.ready', box = { id: 'bx_1', name: 'ci-1' }, state, previousState, createdAt }: BoxEvent) => {
      const id = eventId();
      const data = { box, ...(previousState && { previousState }), ...(state && { state }) };
      const response = await t.post({ id, type, body: JSON.stringify({ id, type, createdAt, data }) });
      expect(response.body).toEqual({ ok: true, id, duplicate: false });
      return id;
    };
    const box = async (id = 'bx_1') => getBox(t.relay.store.database.kysely, id);

    it('never rolls a box back on an older delivery that arrives later', async () => {
      const newer = await post({ state: 'ready', previousState: 'cloning', createdAt: '2026-11-21T10:00:02.000Z' });
      await post({ type: 'box.error', state: 'error', previousState: 'provisioning', createdAt: '2026-11-21T10:00:01.999Z' });
      expect(await box()).toEqual({
        id: 'bx_1',
        name: 'ci-1',
        state: 'ready',
        previousState: 'cloning',
        stateChangedAt: '2026-11-21T10:00:02.000Z',
        lastEventId: newer,
        hydratedAt: null,
      });
    });

    it('compares createdAt as instants, not as text, whatever the zone offset', async () => {
      await post({ state: 'ready', createdAt: '2026-11-21T10:00:01Z' });
      // 11:00:00.5 at +01:00 is 10:00:00.5Z: older, although it sorts later as written.
      await post({ type: 'box.error', state: 'error', createdAt: '2026-11-21T11:00:00.5+01:00' });
      expect(await box()).toMatchObject({ state: 'ready', stateChangedAt: '2026-11-21T10:00:01.000Z' });
    });

    it('applies an event with the same createdAt as the stored one', async () => {
      await post({ state: 'ready', createdAt: '2026-11-21T10:00:00Z' });
      const same = await post({ type: 'box.error', state: 'error', previousState: 'ready', createdAt: '2026-11-21T10:00:00Z' });
      expect(await box()).toMatchObject({ state: 'error', previousState: 'ready', lastEventId: same });
    });

    it('records hydratedAt on box.hydrated and leaves the state alone, in either order', async () => {
      const stateEvent = await post({ state: 'ready', previousState: 'cloning', createdAt: '2026-11-21T10:00:00Z' });
      await post({ type: 'box.hydrated', createdAt: '2026-11-21T10:05:00Z' });
      await post({ type: 'box.hydrated', createdAt: '2026-11-21T10:01:00Z' }); // older: keeps the later time
      expect(await box()).toEqual({
        id: 'bx_1',
        name: 'ci-1',
        state: 'ready',
        previousState: 'cloning',
        stateChangedAt: '2026-11-21T10:00:00.000Z',
        lastEventId: stateEvent,
        hydratedAt: '2026-11-21T10:05:00.000Z',
      });

      // A box first heard of through box.hydrated has no state until a state event, however old.
      await post({ type: 'box.hydrated', box: { id: 'bx_2', name: 'restored' }, createdAt: '2026-11-21T10:05:00Z' });
      expect(await box('bx_2')).toMatchObject({ state: null, previousState: null, stateChangedAt: null, lastEventId: null, name: 'restored' });
      await post({ box: { id: 'bx_2' }, state: 'idle', createdAt: '2026-11-21T09:00:00Z' });
      expect(await box('bx_2')).toMatchObject({ state: 'idle', name: 'restored', hydratedAt: '2026-11-21T10:05:00.000Z' });
    });

    it('keeps the name when an event has none or is older, and takes the name of a newer event', async () => {
      await post({ box: { id: 'bx_1', name: 'first' }, state: 'ready', createdAt: '2026-11-21T10:00:00Z' });
      await post({ box: { id: 'bx_1' }, state: 'running', createdAt: '2026-11-21T10:00:01Z' });
      expect(await box()).toMatchObject({ name: 'first', state: 'running' });
      await post({ box: { id: 'bx_1', name: 'stale' }, state: 'idle', createdAt: '2026-11-21T09:00:00Z' });
      expect(await box()).toMatchObject({ name: 'first', state: 'running' });
      await post({ type: 'box.hydrated', box: { id: 'bx_1', name: 'hydrated-name' }, createdAt: '2026-11-21T10:00:02Z' });
      expect(await box()).toMatchObject({ name: 'first' });
      await post({ box: { id: 'bx_1', name: 'renamed' }, state: 'idle', createdAt: '2026-11-21T10:00:03Z' });
      expect(await box()).toMatchObject({ name: 'renamed', state: 'idle' });
    });

    it('ends on the newest state when deliveries arrive concurrently in shuffled order', async () => {
      const states = ['provisioning', 'provisioned', 'cloning', 'ready', 'running', 'idle', 'archiving', 'archived'];
      const events = states.map((state, i) => ({ state, createdAt: new Date(Date.UTC(2026, 10, 21, 10, 0, i)).toISOString() }));
      const shuffled = [...events.slice(4).reverse(), ...events.slice(0, 4)]; // newest is sent first
      await Promise.all(shuffled.map((e) => post(e)));
      expect(await box()).toMatchObject({ state: 'archived', stateChangedAt: events.at(-1)?.createdAt });
    });
  });
}
