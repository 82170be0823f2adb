import { defineConfig } from 'vitest/config';

/** `npm run build && npx vitest run --config scripts/screenshots.config.ts`: docs/console/*.png from a real run. */
export default defineConfig({
  test: {
    include: ['scripts/console-screenshots.ts'],
    testTimeout: 60_000,
    hookTimeout: 30_000,
  },
});
