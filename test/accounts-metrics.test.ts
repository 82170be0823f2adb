import { writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import request from 'supertest';
import { afterEach, describe, expect, it } from 'vitest';
import { BOX_EVENT_TYPES } from '../src/events/types.js';
import { WEBHOOK_OUTCOMES } from '../src/metrics/metrics.js';
import { sqliteFile } from './support/databases.js';
import { parseExposition, seriesOf, valueOf, type Exposition } from './support/prometheus.js';
import { testRelay, type TestRelay } from './support/relay.js';
import { SECRET, delivery, sendRaw } from './support/sign.js';

const PROD = 'whsec_cHJvZC1tZXRyaWNzLXNlY3JldC0wMTIzNDU2Nzg5';
const STAGING = 'whsec_c3RhZ2luZy1tZXRyaWNzLXNlY3JldC0wMTIzNDU2';
const EXPIRY = '2026-11-22T10:00:00Z';
const PROD_PREVIOUS = 'whsec_cHJvZC1wcmV2aW91cy1zZWNyZXQtMDEyMzQ1Njc4';

describe('the account label of the receiver’s metrics and the secrets gauges (contract section 21), read from /metrics', () => {
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

  const secretsValid = (e: Exposition) => Object.fromEntries(seriesOf(e, 'boxrelay_secrets_valid').map((s) => [s.labels.account, s.value]));

  it('gauges the secrets of each account whose endpoint is served: default’s series leaves with its last secret beside other accounts', async () => {
    const database = sqliteFile();
    const defaultFile = join(dirname(database), 'default-secrets');
    writeFileSync(defaultFile, `${SECRET} ${EXPIRY}\n`);
    t = await start({ database, secrets: [], secretsFile: defaultFile });
    expect(secretsValid(await scrape())).toEqual({ default: 1, prod: 1, staging: 1 });

    // No default secret now: POST /webhooks answers 404, and nothing reads as a default without secrets.
    t.clock.set(Date.parse(EXPIRY) + 1);
    expect((await t.post()).status).toBe(404);
    const e = await scrape();
    expect(secretsValid(e)).toEqual({ prod: 1, staging: 1 });
    expect(seriesOf(e, 'boxrelay_secret_expiry_timestamp_seconds')).toEqual([]);
  });

  it('gauges each account’s secrets and expiries by account: one account’s secrets running out reads 0 for it alone', async () => {
    // staging's only secret expires (its secrets file gives the time); default's and prod's do not.
    const database = sqliteFile();
    const stagingFile = join(dirname(database), 'staging-secrets');
    writeFileSync(stagingFile, `${STAGING} ${EXPIRY}\n`);
    t = await start({ database, accounts: [{ name: 'prod', secrets: [PROD] }, { name: 'staging', secrets: [], secretsFile: stagingFile }] });
    let e = await scrape();
    expect(secretsValid(e)).toEqual({ default: 1, prod: 1, staging: 1 });
    expect(seriesOf(e, 'boxrelay_secret_expiry_timestamp_seconds').map(({ labels, value }) => ({ labels, value }))).toEqual([
      { labels: { account: 'staging', slot: '0' }, value: Date.parse(EXPIRY) / 1000 },
    ]);

    t.clock.set(Date.parse(EXPIRY) + 1);
    e = await scrape();
    expect(secretsValid(e)).toEqual({ default: 1, prod: 1, staging: 0 });
    expect(seriesOf(e, 'boxrelay_secret_expiry_timestamp_seconds')).toEqual([]);
  });

  it('counts the secret slot that matched under the endpoint’s account, every account’s slots starting at 0', async () => {
    t = await start({ accounts: [{ name: 'prod', secrets: [PROD, PROD_PREVIOUS] }] });
    const matches = (e: Exposition) => seriesOf(e, 'boxrelay_signature_secret_matches_total').map(({ labels, value }) => ({ ...labels, value }));
    expect(matches(await scrape())).toEqual([
      { account: 'default', slot: '0', value: 0 },
      { account: 'prod', slot: '0', value: 0 },
      { account: 'prod', slot: '1', value: 0 },
    ]);
    expect((await t.post()).status).toBe(200);
    // prod's old secret (slot 1) still in use during its rotation: told apart from default's slot 0.
    for (let i = 0; i < 2; i++) expect((await t.postTo('prod', PROD_PREVIOUS)).status).toBe(200);
    expect(matches(await scrape())).toEqual([
      { account: 'default', slot: '0', value: 1 },
      { account: 'prod', slot: '0', value: 0 },
      { account: 'prod', slot: '1', value: 2 },
    ]);
  });
});
