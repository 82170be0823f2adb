import { describe, expect, it } from 'vitest';
import { openStore } from '../src/store/store.js';
import { createSinkStates, PROBE_INTERVAL_MS } from '../src/store/sink-state.js';
import { engines } from './support/databases.js';

describe.each(engines)('sink pause state ($name)', ({ url }) => {
  it('an operator pause replaces a pause by failures: no more probes, and a probe never resumes it', async () => {
    const store = await openStore({ url: await url() });
    try {
      const states = createSinkStates(store.database);
      const t0 = 1_000_000;
      expect(await states.pause('h', 'failures', t0)).toBe(true);
      expect(await states.pause('h', 'failures', t0 + 1)).toBe(false);
      expect(await states.takeProbe('h', t0 + PROBE_INTERVAL_MS)).toBe(true);

      expect(await states.pause('h', 'operator', t0 + 2)).toBe(true);
      expect(await states.read('h')).toMatchObject({ paused_by: 'operator', next_probe_at: null });
      expect(await states.takeProbe('h', t0 + 10 * PROBE_INTERVAL_MS)).toBe(false);
      // A probe taken before the operator paused, succeeding after: it does not undo the operator's pause.
      expect(await states.resume('h', 'probe')).toBe(false);
      expect(await states.pause('h', 'failures', t0 + 3)).toBe(false);
      expect(await states.resume('h', 'operator')).toBe(true);
      expect(await states.read('h')).toMatchObject({ paused_at: null, paused_by: null });
    } finally {
      await store.close();
    }
  });
});
