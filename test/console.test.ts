import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Page, Request as BrowserRequest } from 'playwright-core';
import request from 'supertest';
import { afterEach, describe, expect, it } from 'vitest';
import { CONSOLE_CSP } from '../src/http/console/console-app.js';
import { signIn, sharedBrowser } from './support/browser.js';
import { ADMIN_TOKEN, adminAuth, fanoutFixture, hook, outboxRows } from './support/fanout-relay.js';
import { waitFor } from './support/fanout.js';
import type { HookServer } from './support/hook-server.js';
import type { TestRelay } from './support/relay.js';
import { startFakeSandbox } from './support/fake-sandbox.js';

const PROD = 'whsec_cHJvZC1jb25zb2xlLXNlY3JldC0wMTIzNDU2Nzg5';
const PROD_NEXT = 'whsec_cHJvZC1uZXh0LWNvbnNvbGUtc2VjcmV0LTAxMjM=';
const STAGING = 'whsec_c3RhZ2luZy1jb25zb2xlLXNlY3JldC0wMTIzNDU2';

const { server, relay, defer } = fanoutFixture();
const { browser } = sharedBrowser();

// Every test ends with no page having broken its own policy (a hook of its own: the fixture's cleanup still runs).
// The browser reports each violation as a `securitypolicyviolation` event, whatever it logs.
const cspViolations: string[] = [];
const REPORT_CSP_VIOLATIONS =
  "document.addEventListener('securitypolicyviolation', (e) => window.reportCspViolation(e.violatedDirective + ' ' + e.blockedURI + ' ' + e.sample))";
afterEach(() => {
  expect(cspViolations.splice(0)).toEqual([]);
});

/** A started relay with an admin token, its internal port's base URL, and a fresh browser page on it. */
async function consoleOn(overrides: Record<string, unknown>, viewport = { width: 1280, height: 800 }) {
  const t = await relay(overrides, { start: false });
  const { internalPort } = await t.relay.start();
  const base = `http://127.0.0.1:${internalPort}`;
  const context = await browser().newContext({ viewport, timezoneId: 'UTC' });
  defer(() => context.close());
  await context.exposeFunction('reportCspViolation', (text: string) => void cspViolations.push(text));
  await context.addInitScript(REPORT_CSP_VIOLATIONS);
  const page = await context.newPage();
  const requests: string[] = [];
  page.on('request', (r: BrowserRequest) => void requests.push(r.url()));
  return { t, base, page, requests };
}

/**
 * Resolves once `hook` has received event `id` as its request number `from` or later: what the
 * hook's answer function answers 200. The hook's side proves a delivery whatever the relay records.
 */
const receivedFrom = (hook: HookServer, id: string, from: number) =>
  waitFor(() => hook.requests.slice(from).some((r) => (JSON.parse(r.body) as { id: string }).id === id), `${id} at the hook`);

/** The event's status per sink, as the admin API answers it. */
const deliveriesOf = async (t: TestRelay, id: string) =>
  (await request(t.relay.internalApp).get(`/admin/events/${id}`).set(adminAuth)).body.deliveries as { sink: string; status: string }[];

/** A hook that answers every request 422 with `body` as HTML. */
async function hostileHook(body: string): Promise<{ url: string }> {
  const hostile = createServer((req, res) => {
    req.resume();
    req.on('end', () => res.writeHead(422, { 'content-type': 'text/html' }).end(body));
  });
  await new Promise<void>((resolve) => hostile.listen(0, '127.0.0.1', resolve));
  defer(() => new Promise((resolve) => (hostile.closeAllConnections(), hostile.close(resolve))));
  return { url: `http://127.0.0.1:${(hostile.address() as AddressInfo).port}/hook` };
}

/** No element that markup from the upstream could have made. */
const injectedElements = (page: Page) => page.locator('img, svg, iframe, object, embed, script:not([src])').count();

/**
 * The rows' texts of a list, once it shows `count` rows (views load their data after their heading)
 * that pass `until` (views refresh by themselves, so a status the relay records a moment after the
 * hook answered shows up without a reload).
 */
async function rowsOnceThere(page: Page, table: string, count: number, until: (texts: string[]) => boolean = () => true): Promise<string[]> {
  const rows = page.getByRole('table', { name: table }).locator('tbody tr');
  return waitFor(async () => {
    const texts = await rows.allTextContents();
    return texts.length === count && until(texts) ? texts : undefined;
  }, `${count} rows in ${table}`);
}

describe('operator console (contract section 10) in Chromium', () => {
  it('signs in (a wrong token stays on the form), keeps the token for the tab across a reload, signs out, and asks nothing of another host', async () => {
    const { t, base, page, requests } = await consoleOn({});
    await page.goto(`${base}/console`);
    await page.getByLabel('Admin token').fill('wrong-token');
    await page.getByRole('button', { name: 'Sign in' }).click();
    const refused = await page.getByRole('alert').textContent();
    expect(refused).toContain('That token was refused');
    expect(await page.getByLabel('Admin token').isVisible()).toBe(true);
    expect(await page.evaluate('sessionStorage.length')).toBe(0);

    await page.getByLabel('Admin token').fill(ADMIN_TOKEN);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('heading', { name: 'Overview', level: 1 }).waitFor();
    await page.getByRole('table', { name: 'Readiness checks' }).waitFor();
    await page.reload();
    await page.getByRole('heading', { name: 'Overview', level: 1 }).waitFor();
    expect(await page.evaluate('Object.values(sessionStorage)')).toEqual([ADMIN_TOKEN]);
    for (const name of ['Boxes', 'Events', 'Dead letters', 'Replay', 'Sinks']) {
      await page.getByRole('navigation').getByRole('link', { name, exact: true }).click();
      await page.getByRole('heading', { name, level: 1 }).waitFor();
    }

    // The list refreshes by itself: a box that appears later shows up without a reload.
    await page.getByRole('navigation').getByRole('link', { name: 'Boxes', exact: true }).click();
    await page.getByText('No boxes yet').waitFor();
    await t.post({ boxId: 'bx_later', boxName: 'later' });
    await rowsOnceThere(page, 'Boxes', 1);
    // A token refused later (rotated on the relay) sends the tab back to the form, saying why.
    await page.evaluate(`sessionStorage.setItem(sessionStorage.key(0), 'rotated-away')`);
    expect(await page.getByRole('alert').textContent()).toContain('Sign in again');
    expect(await page.evaluate('sessionStorage.length')).toBe(0);
    await signIn(page, base, ADMIN_TOKEN);

    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.getByLabel('Admin token').waitFor();
    expect(await page.evaluate('sessionStorage.length')).toBe(0);

    expect(requests.length).toBeGreaterThan(5);
    for (const url of requests) {
      expect(url.startsWith(`${base}/`), url).toBe(true);
      expect(url).not.toContain(ADMIN_TOKEN);
    }
    expect(t.logs.lines.join('\n')).not.toContain(ADMIN_TOKEN);
  });

  it('finds a box in error by state and search, and lists its events, newest first, with each sink\'s status', async () => {
    const picky = await server(() => 422);
    const good = await server();
    const { t, base, page } = await consoleOn({ hooks: [hook('picky', picky.url, { events: ['box.error'] }), hook('good', good.url)] });
    await t.post({ boxId: 'bx_fine', boxName: 'fine', type: 'box.ready' });
    await t.post({ boxId: 'bx_broken', boxName: 'ci-broken', type: 'box.ready' });
    t.clock.advance(1000);
    await t.post({ boxId: 'bx_broken', boxName: 'ci-broken', type: 'box.error' });
    await waitFor(async () => (await outboxRows(t, 'picky')).some((r) => r.status === 'dead'), 'the dead letter');
    await good.received(3);

    await signIn(page, base, ADMIN_TOKEN);
    await page.getByRole('link', { name: 'Boxes', exact: true }).click();
    await rowsOnceThere(page, 'Boxes', 2);
    await page.getByLabel('State').fill('error');
    await page.getByRole('button', { name: 'Filter' }).click();
    await page.waitForURL(/#\/boxes\?state=error$/);
    expect((await rowsOnceThere(page, 'Boxes', 1))[0]).toContain('ci-broken');

    await page.getByLabel('State').fill('');
    await page.getByLabel('Search id or name').fill('CI-BRO');
    await page.getByRole('button', { name: 'Filter' }).click();
    await page.waitForURL(/q=CI-BRO$/);
    expect((await rowsOnceThere(page, 'Boxes', 1))[0]).toContain('ci-broken');

    await page.getByRole('link', { name: 'bx_broken' }).click();
    await page.getByRole('heading', { name: 'Box bx_broken' }).waitFor();
    const events = await rowsOnceThere(page, 'Events of this box', 2, (texts) => texts.every((text) => text.includes('good: delivered')));
    expect(events[0]).toContain('box.error');
    expect(events[0]).toContain('picky: dead_lettered');
    expect(events[0]).toContain('good: delivered');
    expect(events[1]).toContain('box.ready');
    expect(events[1]).not.toContain('picky');
    // Timestamps in the viewer's zone, the UTC value on hover.
    expect(await page.locator('time').first().getAttribute('title')).toMatch(/^\d{4}-\d\d-\d\dT[\d:.]+Z \(UTC\)$/);
  });

  it('retries a dead letter with "Retry" (then delivered), removes one with "Discard", and retries all of a sink with "Retry all"', async () => {
    const picky = await server((_req, i) => (i < 4 ? 422 : 200));
    const { t, base, page } = await consoleOn({ hooks: [hook('picky', picky.url)] });
    const ids: string[] = [];
    for (let i = 0; i < 4; i++) ids.push((await t.post({ boxId: `bx_${i}` })).deliveryId);
    await waitFor(async () => (await outboxRows(t, 'picky')).filter((r) => r.status === 'dead').length === 4, 'four dead letters');

    await signIn(page, base, ADMIN_TOKEN);
    await page.getByRole('link', { name: 'Dead letters', exact: true }).click();
    const table = page.getByRole('table', { name: 'Dead letters' });
    await rowsOnceThere(page, 'Dead letters', 4);
    expect(await page.getByRole('button', { name: 'Retry all' }).isDisabled()).toBe(true);

    await table.locator('tbody tr', { hasText: ids[0]! }).getByRole('button', { name: 'Retry', exact: true }).click();
    await page.getByText('queued for another try').waitFor();
    await receivedFrom(picky, ids[0]!, 4);
    await rowsOnceThere(page, 'Dead letters', 3);

    await table.locator('tbody tr', { hasText: ids[1]! }).getByRole('button', { name: 'Discard' }).click();
    await page.getByText('discarded').waitFor();
    await rowsOnceThere(page, 'Dead letters', 2);
    expect((await outboxRows(t, 'picky')).map((r) => r.delivery_id)).toEqual([ids[2], ids[3]]);
    // Discarded is what the event's status says from now on, never delivered.
    expect((await deliveriesOf(t, ids[1]!))[0]?.status).toBe('discarded');

    await page.getByLabel('Sink').selectOption('picky');
    await page.waitForURL(/#\/dead-letters\?sink=picky$/);
    await page.getByRole('button', { name: 'Retry all' }).click();
    await page.getByText('2 dead letter(s) of picky queued').waitFor();
    await Promise.all([ids[2]!, ids[3]!].map((id) => receivedFrom(picky, id, 4)));
    await page.getByText('No dead letters for picky.').waitFor();
    expect(picky.requests.slice(4).map((r) => (JSON.parse(r.body) as { id: string }).id).sort()).toEqual([ids[0], ids[2], ids[3]].sort());

    // Pause and Resume, each seen through the API.
    const paused = async () => (await request(t.relay.internalApp).get('/admin/sinks').set(adminAuth)).body.sinks[0].paused as boolean;
    await page.getByRole('navigation').getByRole('link', { name: 'Sinks', exact: true }).click();
    await page.getByRole('button', { name: 'Pause' }).click();
    await page.getByText('picky paused.').waitFor();
    expect(await paused()).toBe(true);
    await page.getByRole('button', { name: 'Resume' }).click();
    await page.getByText('picky resumed.').waitFor();
    expect(await paused()).toBe(false);
  });

  it('shows a hook whose work waits for its maxPerSecond turn as throttled, beside its backlog', async () => {
    const slow = await server();
    const { t, base, page } = await consoleOn({ hooks: [hook('limited', slow.url, { maxPerSecond: 1, concurrency: 2 })] });
    for (let i = 0; i < 8; i++) await t.post({ boxId: `bx_${i}` });
    await waitFor(async () => (await request(t.relay.internalApp).get('/admin/sinks').set(adminAuth)).body.sinks[0].throttled, 'the hook to be throttled');
    await signIn(page, base, ADMIN_TOKEN);
    await page.getByRole('navigation').getByRole('link', { name: 'Sinks', exact: true }).click();
    const [row] = await rowsOnceThere(page, 'Sinks', 1);
    expect(row).toMatch(/^limitedhookupno\d+ throttled0/);
    await slow.received(8);
  });

  it('shows each hook\'s filter and transform read only, and on an event the body each transform made of it, or its error', async () => {
    const [pager, regional, quiet] = [await server(() => 202), await server(), await server()];
    const { t, base, page } = await consoleOn({
      hooks: [
        hook('pager', pager.url, { format: 'pagerduty', routingKey: 'R0123456789abcdef0123456789abcde' }),
        hook('regional', regional.url, { filter: 'event.data.box.name.startsWith("ci-")', transform: '{"region": event.data.region}' }),
        hook('quiet', quiet.url, { transform: 'event.type == "box.ready" ? "ready" : null' }),
      ],
    });
    const posted = await t.post({ boxId: 'bx_1', boxName: 'ci-<b>1</b>', type: 'box.error' });
    await pager.received(1);
    await waitFor(async () => (await outboxRows(t, 'regional')).some((r) => r.status === 'dead'), 'the dead letter');

    await signIn(page, base, ADMIN_TOKEN);
    await page.getByRole('navigation').getByRole('link', { name: 'Sinks', exact: true }).click();
    const hooks = await rowsOnceThere(page, 'Hooks', 3);
    expect(hooks[0]).toContain('pagerduty');
    expect(hooks[0]).toContain('"event_action": "trigger"');
    expect(hooks[0]).toContain('routingKey');
    expect(hooks[0]).not.toContain('R0123456789abcdef0123456789abcde');
    expect(hooks[1]).toContain('event.data.box.name.startsWith("ci-")');
    expect(hooks[1]).toContain('{"region": event.data.region}');

    await page.goto(`${base}/console#/events/${posted.deliveryId}`);
    const bodies = await rowsOnceThere(page, 'Transformed bodies', 3);
    expect(bodies[0]).toMatch(/^pagerapplication\/json\{/);
    expect(bodies[0]).toContain('"dedup_key": "boxrelay-bx_1"');
    expect(bodies[0]).toContain('"summary": "box ci-<b>1</b> (bx_1) entered error"');
    expect(bodies[0]).toContain('"routing_key": "[redacted]"');
    expect(bodies[1]).toBe('regional—transform_failed: field not found: region');
    expect(bodies[2]).toContain('quiet—Nothing: the transform gives null');
    expect(await injectedElements(page)).toBe(0);
  });

  it('replays from the form and reports the count queued', async () => {
    const good = await server();
    const { t, base, page } = await consoleOn({ hooks: [hook('good', good.url)] });
    for (let i = 0; i < 3; i++) await t.post({ boxId: `bx_${i}` });
    await good.received(3);
    await signIn(page, base, ADMIN_TOKEN);
    await page.getByRole('link', { name: 'Replay', exact: true }).click();
    // The page runs in UTC: the local time typed is the UTC time.
    await page.getByLabel('Since').fill(new Date(t.clock.now() - 60_000).toISOString().slice(0, 16));
    await page.getByLabel('Sink').selectOption('good');
    await page.getByRole('button', { name: 'Replay' }).click();
    await page.getByText('3 deliveries queued again.').waitFor();
    await good.received(6);
  });

  it('shows markup from the upstream as text on every view: no element is made of it, no script runs, no request follows it', async () => {
    const good = await server();
    const { t, base, page, requests } = await consoleOn({ hooks: [hook('good', good.url)] });
    const name = '<img src=x onerror=alert(1)>';
    const state = '<script>alert(2)</script><svg onload=alert(3)>';
    const posted = await t.post({ boxId: 'bx_xss', boxName: name, type: 'box.error', state });
    await good.received(1);

    await signIn(page, base, ADMIN_TOKEN);
    const views: [string, () => Promise<unknown>][] = [
      ['#/boxes', () => page.getByRole('cell', { name, exact: true }).waitFor()],
      ['#/boxes/bx_xss', () => page.locator('dd', { hasText: name }).waitFor()],
      ['#/events', () => page.getByRole('cell', { name: 'box.error', exact: true }).waitFor()],
      [`#/events/${posted.deliveryId}`, () => page.locator('pre', { hasText: name }).waitFor()],
    ];
    for (const [view, shown] of views) {
      await page.goto(`${base}/console${view}`);
      await shown();
      expect(await injectedElements(page), view).toBe(0);
    }
    expect(await page.locator('pre').textContent()).toContain(state);
    expect(requests.filter((url) => !url.startsWith(`${base}/`) || /\/x$/.test(url))).toEqual([]);
  });

  it('opens the views of boxes "." and ".." and of an event whose id holds /, ?, #, %, & and dots', async () => {
    const good = await server();
    const { t, base, page } = await consoleOn({ hooks: [hook('good', good.url)] });
    const oddId = 'evt_../a/b?c=d#e%2E%2Ff&g +é';
    await t.post({ boxId: '.', boxName: 'one dot' });
    await t.post({ boxId: '..', boxName: 'two dots' });
    await t.post({ id: oddId, boxId: 'bx_odd' });
    await good.received(3);

    await signIn(page, base, ADMIN_TOKEN);
    for (const [id, boxName] of [['..', 'two dots'], ['.', 'one dot']] as const) {
      await page.getByRole('navigation').getByRole('link', { name: 'Boxes', exact: true }).click();
      await rowsOnceThere(page, 'Boxes', 3);
      await page.getByRole('link', { name: id, exact: true }).click();
      await page.getByRole('heading', { name: `Box ${id}`, exact: true }).waitFor();
      await page.locator('dd', { hasText: boxName }).waitFor();
      await rowsOnceThere(page, 'Events of this box', 1, ([text]) => text!.includes('good: delivered'));
    }
    await page.getByRole('navigation').getByRole('link', { name: 'Events', exact: true }).click();
    await rowsOnceThere(page, 'Events', 3);
    await page.getByRole('link', { name: oddId, exact: true }).click();
    await page.getByRole('heading', { name: `Event ${oddId}`, exact: true }).waitFor();
    expect(await page.locator('pre').textContent()).toContain(JSON.stringify(oddId));
    expect(await rowsOnceThere(page, 'Deliveries', 1)).toEqual([expect.stringContaining('good')]);
    // The address bar holds the view: a reload opens the same event.
    await page.reload();
    await page.getByRole('heading', { name: `Event ${oddId}`, exact: true }).waitFor();
  });

  it('lists the accounts (endpoint, secrets, last delivery, counts, reconciliation), each count opening its events or boxes', async () => {
    const upstream = await startFakeSandbox();
    defer(() => upstream.close());
    const { t, base, page } = await consoleOn({
      accounts: [
        { name: 'prod', secrets: [PROD, PROD_NEXT], upstreamBaseUrl: upstream.baseUrl, upstreamApiKey: upstream.apiKey },
        { name: 'staging', secrets: [STAGING] },
      ],
      reconcileInterval: '0',
    });
    await t.post({ boxId: 'bx_1' });
    for (const boxId of ['bx_1', 'bx_2']) expect((await t.postTo('prod', PROD, { boxId })).status).toBe(200);
    expect((await t.postTo('staging', STAGING, { boxId: 'bx_9', boxName: 'staging-only' })).status).toBe(200);

    await signIn(page, base, ADMIN_TOKEN);
    await page.getByRole('navigation').getByRole('link', { name: 'Accounts', exact: true }).click();
    const received = new Date(t.clock.now()).toISOString();
    const rows = await rowsOnceThere(page, 'Accounts', 3);
    expect(rows[0]).toMatch(/^defaultPOST \/webhooks1.+11Not configured$/);
    expect(rows[1]).toMatch(/^prodPOST \/webhooks\/prod2.+22No run yet\.$/);
    expect(rows[2]).toMatch(/^stagingPOST \/webhooks\/staging1.+11Not configured$/);
    expect(await page.getByRole('table', { name: 'Accounts' }).locator('time').first().getAttribute('datetime')).toBe(received);

    // prod's events: its two, none of staging's.
    await page.getByRole('row', { name: /^prod/ }).getByRole('link', { name: '2' }).first().click();
    await page.waitForURL(/#\/events\?account=prod$/);
    // The URL changes before the view renders its filter: read it once the view has it.
    await expect.poll(() => page.getByLabel('Account').inputValue()).toBe('prod');
    const events = await rowsOnceThere(page, 'Events', 2);
    for (const row of events) expect(row).toMatch(/prodbox\.ready/);
    await page.goBack();
    await page.getByRole('row', { name: /^staging/ }).getByRole('link', { name: '1' }).last().click();
    await page.waitForURL(/#\/boxes\?account=staging$/);
    expect(await rowsOnceThere(page, 'Boxes', 1)).toEqual([expect.stringMatching(/^bx_9stagingstaging-only/)]);
  });

  it('shows and filters events and boxes by account, and opens one account\'s box and event (never another account\'s of the same id)', async () => {
    const good = await server();
    const { t, base, page } = await consoleOn({ accounts: [{ name: 'prod', secrets: [PROD] }], hooks: [hook('good', good.url, { events: ['box.ready', 'box.error'] })] });
    const id = 'evt_0123456789abcdef0123456789abcdef';
    await t.post({ id, boxId: 'bx_shared', boxName: 'ci-default' });
    expect((await t.postTo('prod', PROD, { id, boxId: 'bx_shared', boxName: 'ci-prod', type: 'box.error' })).status).toBe(200);
    await good.received(2);

    await signIn(page, base, ADMIN_TOKEN);
    await page.getByRole('navigation').getByRole('link', { name: 'Boxes', exact: true }).click();
    expect((await rowsOnceThere(page, 'Boxes', 2)).sort()).toEqual([expect.stringMatching(/^bx_shareddefaultci-default/), expect.stringMatching(/^bx_sharedprodci-prod/)]);
    await page.getByLabel('Account').selectOption('prod');
    await page.getByRole('button', { name: 'Filter' }).click();
    await page.waitForURL(/#\/boxes\?account=prod$/);
    await rowsOnceThere(page, 'Boxes', 1, ([text]) => text!.includes('ci-prod'));

    await page.getByRole('link', { name: 'bx_shared', exact: true }).click();
    await page.waitForURL(/#\/boxes\/bx_shared\?account=prod$/);
    await page.locator('dd', { hasText: 'ci-prod' }).waitFor();
    expect(await rowsOnceThere(page, 'Events of this box', 1, ([text]) => text!.includes('good: delivered'))).toEqual([expect.stringContaining('box.error')]);
    await page.getByRole('link', { name: id, exact: true }).click();
    await page.waitForURL(new RegExp(`#/events/${id}\\?account=prod$`));
    await rowsOnceThere(page, 'Deliveries', 1, ([text]) => text!.includes('delivered'));
    const shown = JSON.parse((await page.locator('pre.json').last().textContent()) as string) as { boxrelayaccount: string; data: { box: { name: string } } };
    expect([shown.boxrelayaccount, shown.data.box.name]).toEqual(['prod', 'ci-prod']);
    // Resend goes to prod's event, not default's of the same id.
    await page.getByRole('button', { name: 'Resend' }).click();
    await page.getByText('Event queued for good again.').waitFor();
    await good.received(3);
    expect((JSON.parse(good.requests.at(-1)!.body) as { boxrelayaccount: string }).boxrelayaccount).toBe('prod');

    await page.getByRole('navigation').getByRole('link', { name: 'Events', exact: true }).click();
    expect((await rowsOnceThere(page, 'Events', 2)).map((row) => /(default|prod)box\./.exec(row)?.[1]).sort()).toEqual(['default', 'prod']);
    await page.getByLabel('Account').selectOption('default');
    await page.getByRole('button', { name: 'Filter' }).click();
    await page.waitForURL(/#\/events\?account=default$/);
    expect(await rowsOnceThere(page, 'Events', 1)).toEqual([expect.stringMatching(/defaultbox\.readybx_shared/)]);
  });

  it('keeps lists usable at phone width (390x844): the page does not overflow, the table scrolls inside its box', async () => {
    const picky = await server((_req, i) => (i === 0 ? 422 : 200));
    const { t, base, page } = await consoleOn({ hooks: [hook('picky', picky.url)] }, { width: 390, height: 844 });
    const posted = await t.post({ boxId: 'bx_a_rather_long_box_identifier_0123456789' });
    await waitFor(async () => (await outboxRows(t, 'picky')).some((r) => r.status === 'dead'), 'the dead letter');

    await signIn(page, base, ADMIN_TOKEN);
    for (const view of ['#/boxes', '#/dead-letters']) {
      await page.goto(`${base}/console${view}`);
      await page.getByRole('table').waitFor();
      expect(await page.evaluate<number>('document.documentElement.scrollWidth')).toBeLessThanOrEqual(390);
      const signOut = await page.getByRole('button', { name: 'Sign out' }).boundingBox();
      expect(signOut!.x + signOut!.width).toBeLessThanOrEqual(390);
    }
    const scrollsInside = "(el => el.scrollWidth > el.clientWidth && getComputedStyle(el).overflowX === 'auto')(document.querySelector('.table-wrap'))";
    expect(await page.evaluate(scrollsInside)).toBe(true);
    // The row's buttons scroll into view and work.
    await page.getByRole('button', { name: 'Retry', exact: true }).click();
    await page.getByText('queued for another try').waitFor();
    await receivedFrom(picky, posted.deliveryId, 1);
  });
});

describe('the CSP check of these tests', () => {
  it('lists an event\'s attempts and opens one (request and response headers); "Resend" sends it to that sink again', async () => {
    const receiver = await server((_req, i) => (i === 0 ? { status: 500, headers: { 'content-type': 'text/html', 'x-trace': '<b>t</b>' } } : 200));
    const { t, base, page, requests } = await consoleOn({ hooks: [hook('alerts', receiver.url, { headers: { Authorization: 'Bearer s3cret' } })] });
    const { deliveryId } = await t.post();
    await receiver.received(2);
    await waitFor(async () => (await request(t.relay.internalApp).get(`/admin/events/${deliveryId}/attempts`).set(adminAuth)).body.attempts.length === 2, 'two attempts');

    await signIn(page, base, ADMIN_TOKEN);
    await page.goto(`${base}/console#/events/${deliveryId}`);
    const rows = await rowsOnceThere(page, 'Attempts', 2);
    expect(rows[0]).toContain('delivered');
    expect(rows[1]).toContain('retried');
    expect(rows[1]).toContain('http_500');
    await page.getByRole('table', { name: 'Attempts' }).locator('tbody tr').nth(1).getByRole('button', { name: 'Open' }).click();
    const opened = page.getByRole('region', { name: 'Attempt 1 to alerts' });
    await opened.waitFor();
    expect(await opened.getByRole('table', { name: 'Request headers' }).textContent()).toContain('[redacted]');
    expect(await opened.getByRole('table', { name: 'Response headers' }).textContent()).toContain('<b>t</b>');
    expect(await page.content()).not.toContain('s3cret');

    // Resend: the hook gets the delivered event once more.
    await page.getByRole('table', { name: 'Deliveries' }).getByRole('button', { name: 'Resend' }).click();
    await page.getByText('Event queued for alerts again.').waitFor();
    expect((await receiver.received(3))[2]?.headers['webhook-id']).toBe(deliveryId);
    expect((await request(t.relay.internalApp).get('/admin/audit?action=resend').set(adminAuth)).body.audit).toHaveLength(1);
    expect(requests.filter((url) => !url.startsWith(`${base}/`))).toEqual([]);
  });

  it('shows a hook\'s answer body as text, never rendered: no element is made of it, no script runs', async () => {
    const hostile = '<img src=x onerror="window.hacked=1"><script>window.hacked=2</script><iframe src="/x"></iframe>';
    const answering = await hostileHook(hostile);
    const { t, base, page, requests } = await consoleOn({ hooks: [hook('hostile', answering.url, { maxAttempts: 1 })] });
    const { deliveryId } = await t.post();
    await waitFor(async () => (await outboxRows(t, 'hostile')).some((r) => r.status === 'dead'), 'a dead letter');

    await signIn(page, base, ADMIN_TOKEN);
    await page.goto(`${base}/console#/events/${deliveryId}`);
    await rowsOnceThere(page, 'Attempts', 1);
    await page.getByRole('button', { name: 'Open' }).click();
    const shown = page.getByLabel('Response body');
    await shown.waitFor();
    expect(await shown.textContent()).toBe(hostile);
    expect(await injectedElements(page)).toBe(0);
    expect(await page.evaluate('window.hacked')).toBeUndefined();

    // The sink's page: its health, the failure listed and opened, the chart of attempts per minute.
    await page.goto(`${base}/console#/sinks/hostile`);
    const health = await rowsOnceThere(page, 'Health', 8);
    expect(health).toContain('Attempts1');
    expect(health).toContain('Success rate0.0 %');
    await rowsOnceThere(page, 'Failed attempts', 1);
    await page.getByRole('table', { name: 'Failed attempts' }).getByRole('button', { name: 'Open' }).click();
    expect(await page.getByLabel('Response body').textContent()).toBe(hostile);
    expect(await injectedElements(page)).toBe(0);
    const chart = await waitFor(
      async () =>
        (await page.evaluate(`(() => { const u = document.querySelector('figure.chart canvas')?.uplot; return u && { labels: u.series.slice(1).map((s) => s.label), sums: u.data.slice(1).map((ys) => ys.reduce((a, b) => a + b, 0)) }; })()`)) as
          | { labels: string[]; sums: number[] }
          | undefined,
      'the chart',
    );
    expect(chart).toEqual({ labels: ['dead_lettered'], sums: [1] });
    expect(await page.evaluate('window.hacked')).toBeUndefined();
    expect(requests.filter((url) => !url.startsWith(`${base}/`) || /\/x$/.test(url))).toEqual([]);
  });

  it('shows each sink\'s success rate and p95 over the last hour, linking to its page', async () => {
    const receiver = await server((_req, i) => (i === 0 ? 503 : 200));
    const { t, base, page } = await consoleOn({ hooks: [hook('alerts', receiver.url)] });
    const { deliveryId } = await t.post();
    await receiver.received(2);
    await waitFor(async () => (await request(t.relay.internalApp).get(`/admin/events/${deliveryId}/attempts`).set(adminAuth)).body.attempts.length === 2, 'two attempts');
    await signIn(page, base, ADMIN_TOKEN);
    await page.goto(`${base}/console#/sinks`);
    const [row] = await rowsOnceThere(page, 'Sinks', 1);
    expect(row).toContain('50.0 %');
    expect(row).toMatch(/\d+ ms/);
    await page.getByRole('table', { name: 'Sinks' }).getByRole('link', { name: 'alerts' }).click();
    await page.waitForURL(/#\/sinks\/alerts$/);
    expect(await rowsOnceThere(page, 'Health', 8)).toContain('Attempts2');
  });

  it('catches a violation (it is not a no-op)', async () => {
    const { base, page } = await consoleOn({});
    await page.goto(`${base}/console`);
    await page.evaluate("document.body.insertAdjacentHTML('beforeend', '<img src=x onerror=alert(1)>')");
    const caught = await waitFor(() => (cspViolations.length > 0 ? cspViolations.splice(0) : undefined), 'a violation');
    expect(caught.join('\n')).toMatch(/^script-src/m);
  });
});

describe('GET /console: served by the relay with a strict policy', () => {
  it('answers the page and its assets with CSP and no framing; 404 without an admin token', async () => {
    const t = await relay({}, { start: false });
    const app = t.relay.internalApp;
    for (const path of ['/console', '/console/app.js', '/console/console.css']) {
      const response = await request(app).get(path);
      expect(response.status, path).toBe(200);
      expect(response.headers['content-security-policy']).toBe(CONSOLE_CSP);
      expect(response.headers['x-frame-options']).toBe('DENY');
      expect(response.headers['x-content-type-options']).toBe('nosniff');
    }
    expect(CONSOLE_CSP).toContain("default-src 'self'");
    expect(CONSOLE_CSP).toContain("frame-ancestors 'none'");
    const page = await request(app).get('/console');
    expect(page.headers['content-type']).toMatch(/^text\/html/);
    // No inline script or style: every script and style is a file of the relay's own.
    expect(page.text).not.toMatch(/<script(?![^>]*\bsrc=)|<style|\sstyle=|\son\w+=/i);
    expect((await request(app).get('/console/app.js')).headers['content-type']).toMatch(/^(text|application)\/javascript/);
    expect((await request(app).get('/console/nope.js')).status).toBe(404);

    const off = await relay({ adminToken: undefined }, { start: false });
    const missing = await request(off.relay.internalApp).get('/console');
    expect([missing.status, missing.body.code]).toEqual([404, 'not_found']);
  });
});
