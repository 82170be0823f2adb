import { defineConfig } from 'vitest/config';

/**
 * Files whose assertions ride on timing a busy machine bends (leases run out, a process frozen past
 * its lease, bursts against a bounded queue, outages of a service they start): run one at a time,
 * after the rest, with the machine to themselves.
 */
const ALONE = [
  'attempts',
  'fanout-order-pause',
  'fanout-order-replicas',
  'log-cursors',
  'nats-outage',
  'nats-permanent',
  'postgres-moves',
  'postgres-restart',
  'receiver-bursts',
  'reconcile-lease',
  's3-archive-replicas',
  'tracing',
  'replicas',
  'graceful-shutdown',
  'lane-retake',
].map((name) => `test/${name}.test.ts`);

export default defineConfig({
  test: {
    testTimeout: 30_000,
    hookTimeout: 30_000,
    pool: 'forks',
    setupFiles: ['test/support/setup.ts'],
    projects: [
      // Most files wait on sockets, child processes and databases more than they compute: two at a
      // time keep both cores busy. Not isolated: a worker loads the relay's modules once, not once per
      // file (about 2.5 s each); nothing of the relay is a module-level singleton to leak between files.
      { extends: true, test: { name: 'together', include: ['test/**/*.test.ts'], exclude: ALONE, maxWorkers: 2, isolate: false } },
      { extends: true, test: { name: 'alone', include: ALONE, fileParallelism: false, sequence: { groupOrder: 1 } } },
    ],
  },
});
