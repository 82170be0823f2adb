import { Registry } from 'prom-client';
import request from 'supertest';
import { describe, expect, it } from 'vitest';
import { configSchema } from '../src/config/schema.js';
import { createRelay } from '../src/main.js';
import { DAY_MS } from '../src/clock.js';
import type { PruneResult } from '../src/store/retention/prune.js';
import { schedulePrune } from '../src/store/retention/prune-schedule.js';
import { ManualClock } from './support/clock.js';
import { HandTimers } from './support/timers.js';
import { sqliteFile } from './support/databases.js';
import { captureLogs } from './support/log-capture.js';
import { SECRET, delivery, sendRaw } from './support/sign.js';

const result = (deliveries: number): PruneResult => ({ cutoff: 0, deliveries, boxes: 0, expiredSecrets: 0, audit: 0, removed: { deliveries }, failedSteps: [] });

describe('the daily retention schedule', () => {
  it('runs shortly after start, then once a day, logging what it removed', async () => {
    const timers = new HandTimers();
    const logs = captureLogs();
    let runs = 0;
    const schedule = schedulePrune({ prune: async () => result(++runs), logger: logs.logger, timers });
    expect(timers.planned.map((p) => p.ms)).toEqual([30_000]);
    expect(await timers.fire()).toBe(30_000);
    expect(await timers.fire()).toBe(DAY_MS);
    expect(timers.planned.map((p) => p.ms)).toEqual([DAY_MS]);
    expect(runs).toBe(2);
    expect(logs.entries().filter((e) => e.level === 30).map((e) => e.msg)).toEqual([
      expect.stringMatching(/^removed deliveries: 1,/),
      expect.stringMatching(/^removed deliveries: 2,/),
    ]);
    await schedule.stop();
    expect(timers.planned).toEqual([]);
  });

  it('logs the counts as numbers and how long the run took; the expired secrets count is not redacted', async () => {
    const timers = new HandTimers();
    const logs = captureLogs();
    schedulePrune({ prune: async () => ({ ...result(3), expiredSecrets: 2 }), logger: logs.logger, timers });
    await timers.fire();
    const line = logs.entries().find((e) => e.level === 30);
    expect(line).toMatchObject({ deliveries: 3, expiredSecrets: 2, durationMs: expect.any(Number), msg: expect.stringContaining('expired secrets: 2') });
    expect(logs.text()).not.toContain('[redacted]');
  });

  it('logs a failed run and keeps the schedule', async () => {
    const timers = new HandTimers();
    const logs = captureLogs();
    schedulePrune({ prune: async () => Promise.reject(new Error('disk on fire')), logger: logs.logger, timers });
    await timers.fire();
    expect(logs.entries().find((e) => e.level === 50)).toMatchObject({ msg: expect.stringContaining('prune failed') });
    expect(timers.planned.map((p) => p.ms)).toEqual([DAY_MS]);
  });

  it('stop aborts the run in progress, waits for it and plans no other', async () => {
    const timers = new HandTimers();
    let finish: (r: PruneResult) => void = () => {};
    let signal: AbortSignal | undefined;
    const prune = (s: AbortSignal) => {
      signal = s;
      return new Promise<PruneResult>((resolve) => (finish = resolve));
    };
    const schedule = schedulePrune({ prune, logger: captureLogs().logger, timers });
    const firing = timers.fire();
    expect(signal?.aborted).toBe(false);
    let stopped = false;
    const stopping = schedule.stop().then(() => (stopped = true));
    expect(signal?.aborted).toBe(true);
    await new Promise((resolve) => setImmediate(resolve));
    expect(stopped).toBe(false);
    finish(result(0));
    await Promise.all([firing, stopping]);
    expect(timers.planned).toEqual([]);
  });

  it('is started by the relay and prunes its database with BOXRELAY_RETENTION_DAYS', async () => {
    const config = configSchema.parse({
      fanoutThread: 'inline',
      secrets: [SECRET],
      database: sqliteFile(),
      retentionDays: 7,
      port: 0,
      internalPort: 0,
      host: '127.0.0.1',
      internalHost: '127.0.0.1',
    });
    const clock = new ManualClock();
    const timers = new HandTimers();
    const relay = await createRelay({ config, logger: captureLogs().logger, clock, registry: new Registry(), timers });
    try {
      expect(timers.planned).toEqual([]); // nothing runs before start()
      const post = async (boxId: string) => {
        const d = delivery({ timestamp: clock.seconds, boxId });
        expect((await sendRaw(request(relay.publicApp).post('/webhooks').set(d.headers), d.body)).status).toBe(200);
      };
      await post('bx_old');
      clock.advance(7 * DAY_MS - 1);
      await post('bx_new');
      clock.advance(2);
      await relay.start();
      await timers.fire();
      const kysely = relay.store.database.kysely;
      expect((await kysely.selectFrom('deliveries').select('box_id').execute()).map((r) => r.box_id)).toEqual(['bx_new']);
      expect((await kysely.selectFrom('boxes').select('id').execute()).map((r) => r.id)).toEqual(['bx_new']);
    } finally {
      await relay.stop();
    }
    expect(timers.planned).toEqual([]);
  });
});
