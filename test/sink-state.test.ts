import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import { openStore, type Store } from '../src/store/store.js';
import { createSinkStates, PROBE_INTERVAL_MS } from '../src/store/state/sink-state.js';
import { engines } from './support/databases.js';

describe.each(engines)('sink pause state ($name)', (engine) => {
  const withStore = async (fn: (store: Store) => Promise<void>) => {
    const store = await openStore({ url: await engine.migratedUrl() });
    try {
      await fn(store);
    } finally {
      await store.close();
    }
  };
  /**
   * A probe minute passing by the lease clock: the injected one on SQLite (moved on by the caller),
   * the database's on PostgreSQL (the next probe time moved back a minute).
   */
  const probeMinutePassed = (store: Store) =>
    store.database.kysely.updateTable('sink_state').set({ next_probe_at: sql`next_probe_at - ${engine.name === 'postgres' ? PROBE_INTERVAL_MS : 0}` }).execute();

  it('an operator pause replaces a pause by failures: no more probes, and a probe never resumes it', () =>
    withStore(async (store) => {
      const states = createSinkStates(store.database);
      const t0 = Date.now();
      expect(await states.pause('h', 'failures', t0)).toBe(true);
      expect(await states.pause('h', 'failures', t0 + 1)).toBe(false);
      await probeMinutePassed(store);
      expect(await states.takeProbe('h', t0 + PROBE_INTERVAL_MS)).toBe(true);

      expect(await states.pause('h', 'operator', t0 + 2)).toBe(true);
      expect(await states.read('h')).toMatchObject({ paused_by: 'operator', next_probe_at: null });
      expect(await states.takeProbe('h', t0 + 10 * PROBE_INTERVAL_MS)).toBe(false);
      // A probe taken before the operator paused, succeeding after: it does not undo the operator's pause.
      expect(await states.resume('h', 'probe')).toBe(false);
      expect(await states.pause('h', 'failures', t0 + 3)).toBe(false);
      expect(await states.resume('h', 'operator')).toBe(true);
      expect(await states.read('h')).toMatchObject({ paused_at: null, paused_by: null });
    }));

  it('one probe a minute across replicas, by the lease clock: on PostgreSQL a replica clock minutes ahead probes no sooner', () =>
    withStore(async (store) => {
      const states = createSinkStates(store.database);
      const t0 = Date.now();
      await states.pause('h', 'failures', t0);
      expect(await states.takeProbe('h', t0 + 1000)).toBe(false);
      expect(await states.takeProbe('h', t0 + 10 * PROBE_INTERVAL_MS)).toBe(engine.name === 'sqlite');
      if (engine.name === 'postgres') {
        await probeMinutePassed(store);
        expect(await states.takeProbe('h', t0 - 10 * PROBE_INTERVAL_MS)).toBe(true);
      }
      // Taken: the next one is a minute away for every replica.
      expect(await states.takeProbe('h', t0 + 10 * PROBE_INTERVAL_MS + 1000)).toBe(false);
    }));

  it('a delivery ends a run of failures, and tells a long run (a recovery) from a short one', () =>
    withStore(async (store) => {
      const states = createSinkStates(store.database);
      expect(await states.succeeded('h', 1000)).toBe(false);
      await states.failed('h', 900);
      await states.failed('h', 950);
      expect((await states.read('h')).failing_since).toBe(900);
      expect(await states.succeeded('h', 899)).toBe(false);
      expect((await states.read('h')).failing_since).toBeNull();
      await states.failed('h', 900);
      expect(await states.succeeded('h', 900)).toBe(true);
      expect(await states.succeeded('h', 900)).toBe(false);
    }));
});
