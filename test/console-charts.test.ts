import type { Page } from 'playwright-core';
import { afterEach, describe, expect, it } from 'vitest';
import { signIn, sharedBrowser } from './support/browser.js';
import { ManualClock } from './support/clock.js';
import { ADMIN_TOKEN, fanoutFixture, hook, metricValue } from './support/fanout-relay.js';
import { waitFor } from './support/fanout.js';

const { server, relay, defer } = fanoutFixture();
const { browser } = sharedBrowser();

/** Every page records the policy violations it sees (the console runs only its own files under a strict CSP). */
const pages: Page[] = [];
afterEach(async () => {
  for (const page of pages.splice(0)) expect(await page.evaluate('window.cspViolations')).toEqual([]);
});

/**
 * A relay whose clock is the browser's (the Overview asks for the last 24 h by the browser's time),
 * with a hook that refuses everything beside one that takes everything, and three events sent.
 */
async function relayWithTraffic() {
  const picky = await server(() => 422);
  const good = await server();
  const t = await relay({ hooks: [hook('picky', picky.url), hook('good', good.url)] }, { start: false, clock: new ManualClock(Date.now()) });
  const { internalPort } = await t.relay.start();
  await t.post({ type: 'box.ready', boxId: 'bx_1' });
  await t.post({ type: 'box.ready', boxId: 'bx_2' });
  await t.post({ type: 'box.error', boxId: 'bx_1' });
  await waitFor(async () => (await metricValue(t.registry, 'boxrelay_sink_deliveries_total', { sink: 'picky', outcome: 'dead_lettered' })) === 3, 'three dead letters');
  return { t, base: `http://127.0.0.1:${internalPort}` };
}

async function openPage(options: { width: number; height: number; colorScheme?: 'light' | 'dark' }) {
  const context = await browser().newContext({ viewport: { width: options.width, height: options.height }, colorScheme: options.colorScheme ?? 'light', timezoneId: 'UTC' });
  defer(() => context.close());
  // Run in the page before its own scripts (given as text: the browser's types are not this file's).
  await context.addInitScript(`
    window.cspViolations = [];
    document.addEventListener('securitypolicyviolation', (event) => window.cspViolations.push(event.violatedDirective + ' ' + event.blockedURI));
  `);
  const page = await context.newPage();
  const requests: string[] = [];
  page.on('request', (r) => void requests.push(r.url()));
  pages.push(page);
  return { page, requests };
}

interface Drawn {
  caption: string;
  labels: string[];
  /** Per series, the sum of the values the chart was given. */
  sums: number[];
  points: number;
  width: number;
  axisColor: string;
}

/** What each chart on the page draws, read from the uPlot instance its canvas keeps. */
async function chartsOn(page: Page, count: number): Promise<Drawn[]> {
  return waitFor(async () => {
    const drawn = (await page.evaluate(`
      [...document.querySelectorAll('figure.chart')].map((figure) => {
        const canvas = figure.querySelector('canvas');
        const u = canvas && canvas.uplot;
        const stroke = u && u.axes[0].stroke;
        return {
          caption: figure.querySelector('figcaption').textContent,
          labels: u ? u.series.slice(1).map((s) => s.label) : [],
          sums: u ? u.data.slice(1).map((ys) => ys.reduce((a, b) => a + b, 0)) : [],
          points: u ? u.data[0].length : 0,
          width: canvas ? canvas.getBoundingClientRect().width : 0,
          axisColor: typeof stroke === 'function' ? String(stroke(u, 0)) : String(stroke),
        };
      })
    `)) as Drawn[];
    return drawn.length === count && drawn.every((d) => d.points > 0) ? drawn : undefined;
  }, `${count} charts drawn`);
}

describe('Overview charts (contract section 15) in Chromium', () => {
  it('draws the accepted events per type and the failures per sink it was sent, for 24 h, 1 h and 7 d', async () => {
    const { base } = await relayWithTraffic();
    const { page, requests } = await openPage({ width: 1280, height: 800 });
    await signIn(page, base, ADMIN_TOKEN);
    const [accepted, failed] = await chartsOn(page, 2);
    expect(accepted).toMatchObject({ labels: ['box.error', 'box.ready'], sums: [1, 2], caption: 'Accepted events per type, last 24 hours: box.error 1, box.ready 2' });
    expect(failed).toMatchObject({ labels: ['picky'], sums: [3], caption: 'Failed attempts per sink, last 24 hours: picky 3' });
    // 5-minute buckets over 24 h: 289, or 290 when the window straddles a bucket edge.
    expect(accepted!.points).toBeGreaterThanOrEqual(289);
    expect(accepted!.points).toBeLessThanOrEqual(290);

    await page.getByLabel('Charts period').selectOption('1h');
    await page.waitForURL(/#\/\?period=1h$/);
    const hour = await chartsOn(page, 2);
    expect(hour.map((c) => [c.labels, c.sums])).toEqual([[['box.error', 'box.ready'], [1, 2]], [['picky'], [3]]]);
    expect(hour[0]!.points).toBeLessThanOrEqual(62);

    await page.getByLabel('Charts period').selectOption('7d');
    const week = await waitFor(async () => {
      const charts = await chartsOn(page, 2);
      return charts[0]!.caption.includes('last 7 days') ? charts : undefined;
    }, 'the 7-day charts');
    expect(week.map((c) => c.sums)).toEqual([[1, 2], [3]]);
    expect(week[0]!.points).toBeGreaterThanOrEqual(169);

    for (const url of requests) expect(url.startsWith(`${base}/`), url).toBe(true);
    expect(requests.some((url) => url.endsWith('/console/vendor/uplot.js'))).toBe(true);
  });

  it('is readable in the dark scheme and fits a 375 px screen', async () => {
    const { base } = await relayWithTraffic();
    const { page } = await openPage({ width: 375, height: 740, colorScheme: 'dark' });
    await signIn(page, base, ADMIN_TOKEN);
    const charts = await chartsOn(page, 2);
    expect(await page.evaluate('getComputedStyle(document.documentElement).backgroundColor')).toBe('rgb(13, 17, 23)');
    // The axes' labels take the page's light text colour, not uPlot's default black.
    expect(charts.map((c) => c.axisColor)).toEqual(['#e6edf3', '#e6edf3']);
    for (const chart of charts) expect(chart.width).toBeLessThanOrEqual(375 - 16);
    expect(await page.evaluate('document.documentElement.scrollWidth')).toBeLessThanOrEqual(375);
  });
});

describe('Audit view in Chromium', () => {
  it('lists an operator change made in the console, and a box links to the changes that touched it', async () => {
    const { base } = await relayWithTraffic();
    const { page } = await openPage({ width: 1280, height: 800 });
    await signIn(page, base, ADMIN_TOKEN);
    await page.getByRole('navigation').getByRole('link', { name: 'Sinks', exact: true }).click();
    await page.getByRole('row', { name: /^good/ }).getByRole('button', { name: 'Pause' }).click();
    await page.getByText('good paused.').waitFor();
    await page.getByRole('navigation').getByRole('link', { name: 'Audit', exact: true }).click();
    const rows = page.getByRole('table', { name: 'Audit entries' }).locator('tbody tr');
    const texts = await waitFor(async () => {
      const all = await rows.allTextContents();
      return all.length === 1 ? all : undefined;
    }, 'one audit entry');
    expect(texts[0]).toContain('pause');
    expect(texts[0]).toContain('127.0.0.1');
    expect(texts[0]).toContain('{"sink":"good"}');

    await page.goto(`${base}/console#/boxes/bx_1`);
    await page.getByRole('link', { name: 'operator changes to this box' }).click();
    await page.waitForURL(/#\/audit\?target=bx_1$/);
    await page.getByText('No operator change recorded').waitFor();
  });
});
