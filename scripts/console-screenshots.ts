/**
 * The screenshots of docs/console.md, taken from a real relay (SQLite file, local hook receivers)
 * in Debian's Chromium. Run: `npm run build && npx vitest run --config scripts/screenshots.config.ts`.
 */
import { join } from 'node:path';
import type { Page } from 'playwright-core';
import { it } from 'vitest';
import { signIn, sharedBrowser } from '../test/support/browser.js';
import { ManualClock } from '../test/support/clock.js';
import { ADMIN_TOKEN, allDelivered, fanoutFixture, hook, outboxRows } from '../test/support/fanout-relay.js';
import { waitFor } from '../test/support/fanout.js';

const ZONE = 'Europe/Berlin';
const OUT = join(import.meta.dirname, '..', 'docs', 'console');
const { server, relay, defer } = fanoutFixture();
const { browser } = sharedBrowser();

async function shot(page: Page, name: string, ready: () => Promise<unknown>): Promise<void> {
  await ready();
  await page.screenshot({ path: join(OUT, `${name}.png`), fullPage: true });
}

it('takes the console screenshots', async () => {
  // `alerts` refuses error events (they become dead letters); `archive` takes everything.
  const alerts = await server((request) => (request.body.includes('"box.error"') ? 422 : 200));
  const archive = await server();
  // Two accounts beside `default` (contract section 21): production and staging.
  const accounts = [
    { name: 'prod', secrets: ['whsec_cHJvZC1zY3JlZW5zaG90cy1zZWNyZXQtMDEyMzQ1'] },
    { name: 'staging', secrets: ['whsec_c3RhZ2luZy1zY3JlZW5zaG90cy1zZWNyZXQtMDEy'] },
  ];
  const t = await relay(
    { accounts, hooks: [hook('alerts', alerts.url, { events: ['box.error', 'box.archived'] }), hook('archive', archive.url)] },
    { start: false, clock: new ManualClock(Date.now() - 3 * 60 * 60_000) },
  );
  const { internalPort } = await t.relay.start();
  const base = `http://127.0.0.1:${internalPort}`;
  const boxes = [
    ['bx_7c1a9f', 'ci-main-1841', 'box.ready'],
    ['bx_7c1b02', 'ci-main-1842', 'box.error'],
    ['bx_81d3e4', 'preview-pr-5120', 'box.ready'],
    ['bx_9a0c55', 'nightly-e2e', 'box.archived'],
    ['bx_a4f210', 'ci-release-77', 'box.error'],
  ] as const;
  for (const [boxId, boxName, type] of boxes) {
    // Spread over two hours, so the Overview's charts have a shape.
    await t.post({ boxId, boxName, type: 'box.ready', previousState: 'cloning' });
    t.clock.advance(15 * 60_000);
    if (type !== 'box.ready') await t.post({ boxId, boxName, type, previousState: 'running' });
    t.clock.advance(10 * 60_000);
  }
  for (const [account, boxId, boxName] of [
    ['prod', 'bx_3e9d10', 'web-frontend'],
    ['prod', 'bx_3e9d4b', 'payments-api'],
    ['staging', 'bx_55f0c2', 'web-frontend-next'],
  ] as const) {
    await t.postTo(account, accounts.find((a) => a.name === account)!.secrets[0]!, { boxId, boxName, type: 'box.ready', previousState: 'cloning' });
    t.clock.advance(60_000);
  }
  await waitFor(async () => (await outboxRows(t, 'alerts')).filter((r) => r.status === 'dead').length === 2, 'the dead letters');
  await allDelivered(t, 'archive');

  const context = await browser().newContext({ viewport: { width: 1280, height: 800 }, timezoneId: ZONE, locale: 'en-GB' });
  defer(() => context.close());
  const page = await context.newPage();
  await page.goto(`${base}/console`);
  await shot(page, 'sign-in', () => page.getByLabel('Admin token').waitFor());
  await signIn(page, base, ADMIN_TOKEN);
  const charts = (p: Page) => waitFor(async () => (await p.locator('figure.chart canvas').count()) === 2, 'the charts');
  await shot(page, 'overview', () => charts(page));
  await page.goto(`${base}/console#/boxes?state=error`);
  await shot(page, 'boxes', () => page.getByRole('table', { name: 'Boxes' }).waitFor());
  await page.goto(`${base}/console#/boxes/bx_7c1b02`);
  await shot(page, 'box', () => page.getByRole('table', { name: 'Events of this box' }).waitFor());
  await page.goto(`${base}/console#/events`);
  await shot(page, 'events', () => page.getByRole('table', { name: 'Events' }).waitFor());
  // A box event (the newest are the relay's own dead-letter announcements).
  await page.goto(`${base}/console#/events?type=box.error`);
  await page.getByRole('table', { name: 'Events' }).getByText('bx_a4f210').first().waitFor();
  const firstEvent = await page.getByRole('table', { name: 'Events' }).locator('tbody tr').first().getByRole('link').last();
  await firstEvent.click();
  await shot(page, 'event', () => page.getByRole('table', { name: 'Deliveries' }).waitFor());
  await page.goto(`${base}/console#/dead-letters?sink=alerts`);
  await shot(page, 'dead-letters', () => page.getByRole('table', { name: 'Dead letters' }).waitFor());
  await page.goto(`${base}/console#/sinks`);
  await shot(page, 'sinks', () => page.getByRole('table', { name: 'Sinks' }).waitFor());
  await page.goto(`${base}/console#/replay`);
  // datetime-local takes the viewer's zone: the relay's start, written in Berlin time.
  const since = new Date(t.clock.now() - 30 * 60_000).toLocaleString('sv-SE', { timeZone: ZONE }).replace(' ', 'T').slice(0, 16);
  await page.getByLabel('Since').fill(since);
  await page.getByLabel('Sink').selectOption('archive');
  await page.getByRole('button', { name: 'Replay' }).click();
  await shot(page, 'replay', () => page.getByText('queued again').waitFor());
  await page.goto(`${base}/console#/sinks`);
  await page.getByRole('row', { name: /^archive/ }).getByRole('button', { name: 'Pause' }).click();
  await page.getByText('archive paused.').waitFor();
  await page.getByRole('row', { name: /^archive/ }).getByRole('button', { name: 'Resume' }).click();
  await page.getByText('archive resumed.').waitFor();
  await page.goto(`${base}/console#/accounts`);
  await shot(page, 'accounts', () => page.getByRole('table', { name: 'Accounts' }).waitFor());
  await page.goto(`${base}/console#/audit`);
  await shot(page, 'audit', () => page.getByRole('table', { name: 'Audit entries' }).locator('tbody tr').nth(2).waitFor());

  const phone = await browser().newContext({ viewport: { width: 390, height: 844 }, timezoneId: ZONE, locale: 'en-GB' });
  defer(() => phone.close());
  const small = await phone.newPage();
  await signIn(small, base, ADMIN_TOKEN);
  await small.goto(`${base}/console#/dead-letters`);
  await shot(small, 'phone-dead-letters', () => small.getByRole('table', { name: 'Dead letters' }).waitFor());

  const dark = await browser().newContext({ viewport: { width: 375, height: 812 }, timezoneId: ZONE, locale: 'en-GB', colorScheme: 'dark' });
  defer(() => dark.close());
  const night = await dark.newPage();
  await signIn(night, base, ADMIN_TOKEN);
  await shot(night, 'phone-overview-dark', () => charts(night));
});
