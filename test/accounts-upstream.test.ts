import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import request from 'supertest';
import { afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { listWebhooks, openUpstreamSecrets, registerWebhook, rotateWebhook, type UpstreamStoreDeps } from '../src/cli/upstream.js';
import type { Clock } from '../src/clock.js';
import { configSchema } from '../src/config/schema.js';
import { createUpstreamClient } from '../src/upstream/client.js';
import { ADMIN_TOKEN } from './support/admin.js';
import { ManualClock } from './support/clock.js';
import { engines, sqliteFile } from './support/databases.js';
import { startFakeSandbox, type FakeSandbox } from './support/fake-sandbox.js';
import { captureLogs } from './support/log-capture.js';
import { requireBuild, runCli } from './support/process.js';
import { testRelay, type TestRelay } from './support/relay.js';
import { SECRET, delivery, sendRaw } from './support/sign.js';

const KEY = `base64:${randomBytes(32).toString('base64')}`;
const PROD = 'whsec_cHJvZC1yZWNlaXZlci1zZWNyZXQtMDEyMzQ1Njc=';
const STAGING = 'whsec_c3RhZ2luZy1yZWNlaXZlci1zZWNyZXQtMDEyMzQ=';
const HOUR = 3_600_000;

let prod: FakeSandbox;
let staging: FakeSandbox;
const cleanups: (() => Promise<void>)[] = [];
beforeEach(async () => {
  [prod, staging] = await Promise.all([startFakeSandbox(), startFakeSandbox()]);
});
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  await Promise.all([prod.close(), staging.close()]);
});

const accounts = () => [
  { name: 'prod', secrets: [PROD], upstreamBaseUrl: prod.baseUrl, upstreamApiKey: prod.apiKey },
  { name: 'staging', secrets: [STAGING], upstreamBaseUrl: staging.baseUrl, upstreamApiKey: staging.apiKey },
];

/** `boxrelay upstream … --account <account>` in process, on its own database connection as the real CLI has. */
async function cliFor(database: string, clock: Clock, account: string, upstream: FakeSandbox): Promise<{ deps: UpstreamStoreDeps; out: string[] }> {
  const config = configSchema.parse({ database, secretsEncryptionKey: KEY, accounts: accounts() });
  const opened = await openUpstreamSecrets(config, clock, captureLogs().logger, account);
  cleanups.push(opened.close);
  const out: string[] = [];
  const client = createUpstreamClient({ baseUrl: upstream.baseUrl, apiKey: upstream.apiKey, randomize: false, minTimeout: 1 });
  const settings = config.accounts.find((a) => a.name === account) ?? config;
  return { deps: { account, client, secrets: opened.secrets, cipher: opened.cipher, clock, config: settings, print: (line) => out.push(line) }, out };
}

for (const engine of engines) {
  describe(`boxrelay upstream --account (contract section 21) on ${engine.name}`, () => {
    it("keeps an account's registered and rotated secrets in the database for its endpoint only", async () => {
      const database = await engine.migratedUrl();
      const clock = new ManualClock();
      const registerProd = await cliFor(database, clock, 'prod', prod);
      await listWebhooks(registerProd.deps);
      expect(registerProd.out).toEqual(["no webhook endpoints; create one with `boxrelay upstream register --account prod --url <public URL of the relay's /webhooks/prod>`"]);
      const { webhook } = await registerWebhook(registerProd.deps, { url: 'https://relay.example.com/webhooks/prod', events: ['box.ready'], name: 'boxrelay' });
      const first = prod.secretOf(webhook.id) as string;
      expect(registerProd.out.join('\n')).toContain('every replica accepts it for /webhooks/prod only.');
      // `default` registers one of its own at its own upstream.
      const registerDefault = await cliFor(database, clock, 'default', staging);
      const { webhook: other } = await registerWebhook(registerDefault.deps, { url: 'https://relay.example.com/webhooks', events: ['box.ready'], name: 'boxrelay' });
      const defaultSecret = staging.secretOf(other.id) as string;

      const t = await testRelay({ database, secrets: [SECRET], secretsEncryptionKey: KEY, accounts: accounts(), adminToken: ADMIN_TOKEN }, { clock });
      cleanups.push(() => t.close());
      const statusOf = async (path: string, secret: string) => {
        const d = delivery({ timestamp: t.clock.seconds, secret });
        return (await sendRaw(request(t.relay.publicApp).post(path).set(d.headers), d.body)).status;
      };
      expect(await statusOf('/webhooks/prod', first)).toBe(200);
      expect(await statusOf('/webhooks/prod', PROD)).toBe(200);
      // Never another account's: not default's endpoint, not staging's; and prod does not take default's.
      expect(await statusOf('/webhooks', first)).toBe(401);
      expect(await statusOf('/webhooks/staging', first)).toBe(401);
      expect(await statusOf('/webhooks/prod', defaultSecret)).toBe(401);
      expect(await statusOf('/webhooks', defaultSecret)).toBe(200);

      // A rotation of prod's endpoint gives prod's earlier secret the grace, and no other account's.
      const rotateProd = await cliFor(database, t.clock, 'prod', prod);
      const rotated = await rotateWebhook(rotateProd.deps, webhook.id, { graceMs: HOUR, graceText: '1h', showSecret: false });
      expect(rotated).toMatchObject({ retired: 1 });
      const second = prod.secretOf(webhook.id) as string;
      t.clock.advance(1000);
      expect(await statusOf('/webhooks/prod', second)).toBe(200);
      expect(await statusOf('/webhooks/prod', first)).toBe(200);
      expect(await statusOf('/webhooks', second)).toBe(401);
      t.clock.advance(HOUR);
      expect(await statusOf('/webhooks/prod', first)).toBe(401);
      expect(await statusOf('/webhooks/prod', second)).toBe(200);
      expect(await statusOf('/webhooks', defaultSecret)).toBe(200);
      const rows = await t.relay.store.database.kysely.selectFrom('secrets').select(['account', 'webhook_id', 'expires_at']).orderBy('id').execute();
      expect(rows).toEqual([
        { account: 'prod', webhook_id: webhook.id, expires_at: rotated.expiresAt },
        { account: 'default', webhook_id: other.id, expires_at: null },
        { account: 'prod', webhook_id: webhook.id, expires_at: null },
      ]);
      // The accounts view counts each account's own: its list's and its unexpired database ones.
      const listed = await request(t.relay.internalApp).get('/admin/accounts').set('Authorization', `Bearer ${ADMIN_TOKEN}`);
      expect((listed.body as { accounts: { name: string; secrets: number }[] }).accounts.map((a) => [a.name, a.secrets])).toEqual([
        ['default', 2],
        ['prod', 2],
        ['staging', 1],
      ]);
      for (const secret of [first, second, defaultSecret]) expect(listed.text).not.toContain(secret);
      for (const secret of [first, second, defaultSecret]) expect(t.logs.text()).not.toContain(secret);
    });
  });
}

describe('the real CLI: boxrelay upstream --account', () => {
  beforeAll(requireBuild);

  it("register, list and rotate the named account's endpoint with its own credentials; an unknown account exits 2", async () => {
    const database = sqliteFile();
    const accountsFile = join(dirname(database), 'accounts.yaml');
    writeFileSync(
      accountsFile,
      accounts()
        .map((a) => `- {name: ${a.name}, secrets: [${a.secrets[0]}], upstreamBaseUrl: "${a.upstreamBaseUrl}", upstreamApiKey: ${a.upstreamApiKey}}`)
        .join('\n'),
    );
    const env = { BOXRELAY_DATABASE: database, BOXRELAY_ACCOUNTS_FILE: accountsFile, BOXRELAY_SECRETS_ENCRYPTION_KEY: KEY };
    const url = 'https://relay.example.com/webhooks/staging';
    const registered = await runCli(['upstream', 'register', '--account', 'staging', '--url', url], env);
    expect(registered).toMatchObject({ code: 0, stderr: '' });
    const [endpoint] = staging.endpoints();
    expect(endpoint).toMatchObject({ url });
    expect(prod.endpoints()).toEqual([]);

    const listed = await runCli(['upstream', 'list', '--account', 'staging'], env);
    expect(listed).toMatchObject({ code: 0, stderr: '' });
    expect(listed.stdout).toContain(`${endpoint?.id}  boxrelay  ${url}`);

    const rotated = await runCli(['upstream', 'rotate', endpoint?.id as string, '--account', 'staging', '--grace', '1h'], env);
    expect(rotated).toMatchObject({ code: 0, stderr: '' });
    expect(rotated.stdout).toMatch(/1 earlier database secret\(s\) of wh_[0-9a-f]{24} stay accepted until \S+Z \(grace 1h\)/);
    // Every request went to staging's upstream with staging's key.
    expect(new Set(staging.requests.map((r) => r.authorization))).toEqual(new Set([`Bearer ${staging.apiKey}`]));
    expect(prod.requests).toEqual([]);

    const unknown = await runCli(['upstream', 'list', '--account', 'nope'], env);
    expect(unknown).toEqual({ code: 2, stdout: '', stderr: 'boxrelay: --account: no account is named "nope" (accounts: default, prod, staging)\n' });
    for (const result of [registered, listed, rotated, unknown]) expect(result.stdout + result.stderr).not.toContain(staging.apiKey);
    // Four processes, each starting Node and opening the database: seconds each on a busy machine.
  }, 90_000);
});
