import { statSync } from 'node:fs';
import { join } from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll } from 'vitest';

/** Debian's Chromium, headless; nothing is downloaded. */
export const CHROMIUM = {
  executablePath: '/usr/bin/chromium',
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--no-first-run'],
};

const ROOT = join(import.meta.dirname, '..', '..');

/** The relay serves the console from dist/console, which only `npm run build` makes: refuse a missing or stale one. */
function requireConsoleBuild(): void {
  const built = (path: string) => statSync(join(ROOT, path), { throwIfNoEntry: false })?.mtimeMs ?? 0;
  if (built('dist/console/app.js') < Math.max(built('console/src/app.ts'), built('console/static/index.html'))) {
    throw new Error('dist/console is missing or older than console/: run `npm run build` (npm test does) before this test');
  }
}

/** One browser for the calling file, launched once and closed after its last test. */
export function sharedBrowser(): { browser: () => Browser } {
  let browser: Browser | undefined;
  beforeAll(async () => {
    requireConsoleBuild();
    browser = await chromium.launch(CHROMIUM);
  });
  afterAll(async () => {
    await browser?.close();
  });
  return {
    browser: () => {
      if (!browser) throw new Error('the browser is not launched');
      return browser;
    },
  };
}

/** Signs in through the console's own form. */
export async function signIn(page: Page, base: string, token: string): Promise<void> {
  await page.goto(`${base}/console`);
  await page.getByLabel('Admin token').fill(token);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('heading', { name: 'Overview', level: 1 }).waitFor();
}
