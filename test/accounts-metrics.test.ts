import request from 'supertest';
import { afterEach, describe, expect, it } from 'vitest';
import { BOX_EVENT_TYPES } from '../src/events/types.js';
import { WEBHOOK_OUTCOMES } from '../src/metrics/metrics.js';
import { parseExposition, seriesOf, valueOf, type Exposition } from './support/prometheus.js';
import { testRelay, type TestRelay } from './support/relay.js';
import { SECRET, delivery, sendRaw } from './support/sign.js';

const PROD = 'whsec_cHJvZC1tZXRyaWNzLXNlY3JldC0wMTIzNDU2Nzg5';
const STAGING = 'whsec_c3RhZ2luZy1tZXRyaWNzLXNlY3JldC0wMTIzNDU2';

describe('the account label of webhook_requests_total and events_total (contract section 21), read from /metrics', () => {
  let t: TestRelay;
  afterEach(() => t.close());

  const start = (overrides: Record<string, unknown> = {}) =>
    testRelay({
      secrets: [SECRET],
      accounts: [
        { name: 'prod', secrets: [PROD] },
        { name: 'staging', secrets: [STAGING] },
      ],
      ...overrides,
    });
  const scrape = async (): Promise<Exposition> => parseExposition((await request(t.relay.internalApp).get('/metrics').expect(200)).text);
  const requests = (e: Exposition, account: string, outcome: string) => valueOf(e, 'boxrelay_webhook_requests_total', { account, outcome });
  const events = (e: Exposition, account: string, type: string) => valueOf(e, 'boxrelay_events_total', { account, type });

  it('starts every account at 0 for each outcome and type, and counts each request and event under its endpoint’s account', async () => {
    t = await start();
    const zero = await scrape();
    for (const account of ['default', 'prod', 'staging']) {
      for (const outcome of WEBHOOK_OUTCOMES) expect(requests(zero, account, outcome), `${account} ${outcome}`).toBe(0);
      for (const type of BOX_EVENT_TYPES) expect(events(zero, account, type), `${account} ${type}`).toBe(0);
    }

    expect((await t.post()).status).toBe(200);
    const twice = delivery({ timestamp: t.clock.seconds, secret: PROD, type: 'box.error' });
    for (let i = 0; i < 2; i++) expect((await sendRaw(request(t.relay.publicApp).post('/webhooks/prod').set(twice.headers), twice.body)).status).toBe(200);
    expect((await t.postTo('prod', PROD)).status).toBe(200);
    // The same delivery id as prod's under staging: a new event of staging's.
    expect((await t.postTo('staging', STAGING, { id: twice.id, type: 'box.error' })).status).toBe(200);
    expect((await t.postTo('staging', PROD)).status).toBe(401);

    const e = await scrape();
    expect([requests(e, 'default', 'accepted'), requests(e, 'prod', 'accepted'), requests(e, 'prod', 'duplicate'), requests(e, 'staging', 'accepted')]).toEqual([1, 2, 1, 1]);
    expect([requests(e, 'staging', 'invalid_signature'), requests(e, 'prod', 'invalid_signature'), requests(e, 'default', 'invalid_signature')]).toEqual([1, 0, 0]);
    expect([events(e, 'default', 'box.ready'), events(e, 'prod', 'box.error'), events(e, 'prod', 'box.ready'), events(e, 'staging', 'box.error')]).toEqual([1, 1, 1, 1]);
    expect([events(e, 'default', 'box.error'), events(e, 'staging', 'box.ready')]).toEqual([0, 0]);
  });

  it('counts a POST to an endpoint of no account as not_found under one bounded account value, never the name from the path', async () => {
    t = await start();
    const names = ['nope', 'Prod', '%70rod', `x${'y'.repeat(200)}`, ...Array.from({ length: 20 }, (_, i) => `scan-${i}`)];
    for (const name of names) expect((await t.postTo(name, PROD)).status).toBe(404);
    // `default` has no endpoint of that name, only /webhooks.
    expect((await request(t.relay.publicApp).post('/webhooks/default').send('{}')).status).toBe(404);
    const e = await scrape();
    expect(requests(e, '_unknown', 'not_found')).toBe(names.length + 1);
    const labelled = new Set([...seriesOf(e, 'boxrelay_webhook_requests_total'), ...seriesOf(e, 'boxrelay_events_total')].map((s) => s.labels.account));
    expect(labelled).toEqual(new Set(['default', 'prod', 'staging', '_unknown']));
    // Nothing else moved: no request reached an account.
    for (const account of ['default', 'prod', 'staging']) for (const outcome of WEBHOOK_OUTCOMES) expect(requests(e, account, outcome)).toBe(0);
  });

  it('counts POST /webhooks as the default account’s not_found while it has no secret beside other accounts', async () => {
    t = await start({ secrets: [] });
    expect((await t.post()).status).toBe(404);
    const e = await scrape();
    expect([requests(e, 'default', 'not_found'), requests(e, '_unknown', 'not_found')]).toEqual([1, 0]);
  });
});
