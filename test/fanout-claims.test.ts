import { once } from 'node:events';
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import BetterSqlite3 from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { SERVING_AUTOCHECKPOINT_PAGES, startCheckpointer, type CheckpointResult } from '../src/store/engines/checkpointer.js';
import { openStore } from '../src/store/store.js';
import { sqliteFile } from './support/databases.js';
import { recordWork } from './support/fanout.js';
import { allDelivered, fanoutFixture, fastTuning, hook, outboxRows, unfinishedIds } from './support/fanout-relay.js';

/**
 * A hook that holds every request until `release` of them are in flight, then answers them all,
 * and remembers the most it ever had in flight.
 */
async function gatheringHook(release: number) {
  const held: ServerResponse[] = [];
  let inFlight = 0;
  let most = 0;
  let answered = 0;
  const server = createServer((request, response) => {
    request.resume();
    request.on('end', () => {
      most = Math.max(most, ++inFlight);
      held.push(response);
      if (held.length < release) return;
      for (const r of held.splice(0)) {
        inFlight--;
        answered++;
        r.end();
      }
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/`,
    most: () => most,
    answered: () => answered,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

describe('fan-out claims', () => {
  const { relay, server, defer } = fanoutFixture();

  it('has as many requests in flight as the hook concurrency, never more', async () => {
    const concurrency = 16;
    const target = await gatheringHook(concurrency);
    defer(target.close);
    const t = await relay({ hooks: [hook('wide', target.url, { concurrency })] }, { start: false });
    for (let i = 0; i < 3 * concurrency; i++) await t.post({ boxId: `bx_${i}` });
    await t.relay.start();
    // Each round of answers waits for `concurrency` requests at once: with fewer in flight this never ends.
    await allDelivered(t, 'wide');
    expect(target.answered()).toBe(3 * concurrency);
    expect(target.most()).toBe(concurrency);
  });

  it('leases no more outbox rows than the lane works on, however large the claim batch', async () => {
    const hanging = await server(() => 'hang');
    const t = await relay({ hooks: [hook('h', hanging.url, { concurrency: 8 })], shutdownTimeoutMs: 200 }, { start: false, dispatch: { ...fastTuning, batchSize: 500 } });
    // Outbox rows (as a replay leaves them), which replicas share row by row.
    for (let i = 0; i < 30; i++) await recordWork(t.relay.store, { receivedAt: t.clock.now(), sinks: ['h'], boxId: `bx_${i}` });
    await t.relay.start();
    await hanging.received(8);
    const rows = await outboxRows(t, 'h');
    expect(rows.filter((r) => r.lease_owner !== null)).toHaveLength(8);
    expect(rows).toHaveLength(30);
  });

  it('takes no more from the log than the lane works on, and its cursor stays before what is under way', async () => {
    const hanging = await server(() => 'hang');
    const t = await relay({ hooks: [hook('h', hanging.url, { concurrency: 8 })], shutdownTimeoutMs: 200 }, { start: false, dispatch: { ...fastTuning, batchSize: 500 } });
    for (let i = 0; i < 30; i++) await t.post({ boxId: `bx_${i}` });
    await t.relay.start();
    await hanging.received(8);
    // All 30 wait: 8 under way (the cursors stay before them), 22 not taken; none became an outbox row.
    expect((await unfinishedIds(t, 'h')).size).toBe(30);
    expect(await outboxRows(t, 'h')).toEqual([]);
  });
});

describe('WAL checkpoints', () => {
  it('are taken by the worker, not by the serving connection', async () => {
    const file = sqliteFile();
    const store = await openStore({ url: file });
    try {
      expect(store.database.dialect === 'sqlite' && store.database.sqlite.pragma('wal_autocheckpoint', { simple: true })).toBe(SERVING_AUTOCHECKPOINT_PAGES);
    } finally {
      await store.close();
    }
  });

  /** A WAL file of `rows` uncheckpointed rows of `bytes` each, and a checkpointer over it that resolves `until` once its results satisfy it. */
  async function checkpointed(
    { rows, bytes }: { rows: number; bytes: number },
    intervals: { intervalMs: number; busyIntervalMs?: number },
    until: (results: CheckpointResult[]) => boolean,
  ): Promise<CheckpointResult[]> {
    const file = sqliteFile();
    const writer = new BetterSqlite3(file);
    writer.pragma('journal_mode = WAL');
    writer.pragma('wal_autocheckpoint = 0');
    writer.exec('CREATE TABLE t (v TEXT)');
    const insert = writer.prepare('INSERT INTO t (v) VALUES (?)');
    writer.transaction(() => {
      for (let i = 0; i < rows; i++) insert.run('x'.repeat(bytes));
    })();
    const results: CheckpointResult[] = [];
    const errors: Error[] = [];
    let done: () => void = () => {};
    const reached = new Promise<void>((resolve) => (done = resolve));
    const checkpointer = startCheckpointer({
      file,
      synchronous: 'FULL',
      ...intervals,
      onCheckpoint: (result) => {
        results.push(result);
        if (until(results)) done();
      },
      onError: (error) => errors.push(error),
    });
    try {
      await reached;
      expect(errors).toEqual([]);
      return results;
    } finally {
      await checkpointer.stop();
      writer.close();
    }
  }

  it('copy the committed WAL into the database file in the background', async () => {
    const results = await checkpointed({ rows: 2000, bytes: 200 }, { intervalMs: 10 }, (all) => all.at(-1)!.log > 0 && all.at(-1)!.checkpointed === all.at(-1)!.log);
    expect(results.at(-1)?.log).toBeGreaterThan(100);
  });

  it('checkpoints again soon after one that found many new frames (a burst of writes), not after the quiet interval', async () => {
    // The quiet interval outlasts the test: a second checkpoint within it is the burst's.
    const results = await checkpointed({ rows: 2000, bytes: 1000 }, { intervalMs: 10 * 60_000, busyIntervalMs: 1 }, (all) => all.length === 2);
    expect(results[0]!.log).toBeGreaterThan(256);
  });
});
