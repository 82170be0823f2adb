import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    pool: 'forks',
    // Two files at once, whatever the cores: vitest's default on a 2-core machine is one, and the suite
    // then takes some 12 minutes; most of a file's time is waiting on servers and child processes.
    maxWorkers: 2,
    setupFiles: ['test/support/setup.ts'],
  },
});
