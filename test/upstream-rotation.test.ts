import { randomBytes } from 'node:crypto';
import { afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import {
  SecretNotStoredError,
  listWebhooks,
  openUpstreamSecrets,
  registerWebhook,
  rotateWebhook,
  type UpstreamStoreDeps,
} from '../src/cli/upstream.js';
import type { Clock } from '../src/clock.js';
import { configSchema, type Config } from '../src/config/schema.js';
import { createRelay, NoSecretError } from '../src/main.js';
import { createUpstreamClient } from '../src/upstream/client.js';
import { UpstreamApiError, UpstreamResponseLostError } from '../src/upstream/errors.js';
import { ManualClock } from './support/clock.js';
import { engines, sqliteFile } from './support/databases.js';
import { startFakeSandbox, type FakeSandbox } from './support/fake-sandbox.js';
import { captureLogs, type CapturedLogs } from './support/log-capture.js';
import { requireBuild, runCli } from './support/process.js';
import { testRelay, type TestRelay } from './support/relay.js';

const KEY = `base64:${randomBytes(32).toString('base64')}`;
const RELAY_URL = 'https://relay.example.com/webhooks';
const HOUR = 3_600_000;

let fake: FakeSandbox;
const cleanups: (() => Promise<void>)[] = [];
beforeEach(async () => {
  fake = await startFakeSandbox();
});
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  await fake.close();
});

interface Cli {
  deps: UpstreamStoreDeps;
  /** What the command printed to standard output. */
  out: string[];
  logs: CapturedLogs;
}

/** The upstream commands in process, on their own database connection as the real CLI has. */
async function cli(database: string, clock: Clock, overrides: Partial<Record<keyof Config, unknown>> = {}): Promise<Cli> {
  const config = configSchema.parse({ database, secretsEncryptionKey: KEY, ...overrides });
  const logs = captureLogs();
  const opened = await openUpstreamSecrets(config, clock, logs.logger);
  cleanups.push(opened.close);
  const out: string[] = [];
  const client = createUpstreamClient({ baseUrl: fake.baseUrl, apiKey: fake.apiKey, randomize: false, minTimeout: 1 });
  return { deps: { client, secrets: opened.secrets, cipher: opened.cipher, clock, config, print: (line) => out.push(line) }, out, logs };
}

async function relayOn(database: string, overrides: Partial<Record<keyof Config, unknown>> = {}): Promise<TestRelay> {
  const t = await testRelay({ database, secrets: [], secretsEncryptionKey: KEY, ...overrides });
  cleanups.push(() => t.close());
  return t;
}

const statusOf = async (t: TestRelay, secret: string) => {
  const response = await t.post({ secret });
  return response.status === 401 ? `401 ${(response.body as { code: string }).code}` : String(response.status);
};

const rowCount = async (t: TestRelay) =>
  Number((await t.relay.store.database.kysely.selectFrom('secrets').select((eb) => eb.fn.countAll().as('n')).executeTakeFirstOrThrow()).n);

const scenarios = [
  { engine: engines[0], relays: 1 },
  { engine: engines[1], relays: 2 },
] as const;

describe.each(scenarios)('register and rotate on $engine.name with $relays relay(s) on one database', ({ engine, relays }) => {
  it('accepts the registered secret, both secrets during the grace, only the new one after it', async () => {
    const database = await engine.migratedUrl();
    const register = await cli(database, new ManualClock());
    const { webhook } = await registerWebhook(register.deps, { url: RELAY_URL, events: ['box.ready', 'box.error'], name: 'boxrelay' });
    const first = fake.secretOf(webhook.id) as string;
    expect(register.out.join('\n').split(first)).toHaveLength(2); // printed once
    expect(register.out.join('\n')).toContain(webhook.id);
    expect(register.out.join('\n')).toContain('(encrypted)');

    // No env or file secret: start-up counts the database's.
    const replicas = await Promise.all(Array.from({ length: relays }, () => relayOn(database)));
    for (const t of replicas) expect(await statusOf(t, first)).toBe('200');

    // The rotation runs on the first replica's timeline, so the grace ends on its clock.
    const [leader] = replicas as [TestRelay];
    const rotate = await cli(database, leader.clock);
    const result = await rotateWebhook(rotate.deps, webhook.id, { graceMs: HOUR, graceText: '1h', showSecret: false });
    const second = fake.secretOf(webhook.id) as string;
    expect(second).not.toBe(first);
    expect(result).toMatchObject({ retired: 1, expiresAt: leader.clock.now() + HOUR });
    expect(rotate.out.join('\n')).toContain(`stay accepted until ${new Date(leader.clock.now() + HOUR).toISOString()} (grace 1h)`);

    for (const t of replicas) {
      t.clock.set(leader.clock.now() + 1000); // a second after the last read: the first miss re-reads
      expect(await statusOf(t, second)).toBe('200');
      expect(await statusOf(t, first)).toBe('200');
      expect(await t.registry.getSingleMetricAsString('boxrelay_secrets_valid')).toMatch(/boxrelay_secrets_valid\{account="default"\} 2$/m);
    }

    for (const t of replicas) {
      t.clock.advance(HOUR);
      expect(await statusOf(t, first)).toBe('401 invalid_signature');
      expect(await statusOf(t, second)).toBe('200');
      expect(await t.registry.getSingleMetricAsString('boxrelay_secrets_valid')).toMatch(/boxrelay_secrets_valid\{account="default"\} 1$/m);
    }

    const logged = [register, rotate].map((c) => c.logs.text()).concat(replicas.map((t) => t.logs.text())).join('\n');
    expect(rotate.out.join('\n')).not.toMatch(/whsec_/);
    for (const secret of [first, second]) expect(logged).not.toContain(secret);
  });
});

describe('rotation details', () => {
  it('sees a rotation done elsewhere without traffic: secrets_valid and the expiry gauge follow', async () => {
    const database = sqliteFile();
    const register = await cli(database, new ManualClock());
    const { webhook } = await registerWebhook(register.deps, { url: RELAY_URL, events: ['box.ready'], name: 'boxrelay' });
    const t = await relayOn(database, { databaseSecretsRefreshMs: 10 });
    await t.relay.start();
    expect(await t.registry.getSingleMetricAsString('boxrelay_secrets_valid')).toMatch(/boxrelay_secrets_valid\{account="default"\} 1$/m);

    const changed = t.logs.waitFor((e) => e.msg === 'database secrets changed' && e.count === 2);
    await rotateWebhook((await cli(database, t.clock)).deps, webhook.id, { graceMs: HOUR, graceText: '1h', showSecret: false });
    expect(await changed).toMatchObject({ count: 2, level: 30 });
    expect(await t.registry.getSingleMetricAsString('boxrelay_secrets_valid')).toMatch(/boxrelay_secrets_valid\{account="default"\} 2$/m);
    const expiry = await t.registry.getSingleMetricAsString('boxrelay_secret_expiry_timestamp_seconds');
    expect(expiry).toContain(`{account="default",slot="1"} ${(t.clock.now() + HOUR) / 1000}`);
    expect(expiry).not.toContain('slot="0"');
  });

  it('tells to keep an old secret that lives only in BOXRELAY_SECRETS until the grace ends, and shows the new one on request', async () => {
    const database = sqliteFile();
    const clock = new ManualClock();
    const { deps, out } = await cli(database, clock, { secrets: ['whsec_from_env'] });
    const { webhook } = await deps.client.createWebhook({ name: 'boxrelay', url: RELAY_URL, events: ['box.ready'] });
    const result = await rotateWebhook(deps, webhook.id, { graceMs: 30 * 60_000, graceText: '30m', showSecret: true });
    expect(result.retired).toBe(0);
    const until = new Date(clock.now() + 30 * 60_000).toISOString();
    expect(out.join('\n')).toContain(`If its old secret is in BOXRELAY_SECRETS, keep it there until ${until} (grace 30m), then remove it.`);
    expect(out.at(-1)).toBe(`new secret (--show-secret): ${fake.secretOf(webhook.id)}`);
  });

  it('a lost rotate answer stores nothing and is not repeated', async () => {
    const database = sqliteFile();
    const { deps } = await cli(database, new ManualClock());
    const { webhook } = await registerWebhook(deps, { url: RELAY_URL, events: ['box.ready'], name: 'boxrelay' });
    const t = await relayOn(database);
    const before = await rowCount(t);
    fake.inject({ kind: 'drop', afterProcessing: true, method: 'POST', path: /\/rotate$/ });
    const error = await rotateWebhook(deps, webhook.id, { graceMs: HOUR, graceText: '1h', showSecret: false }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(UpstreamResponseLostError);
    expect(await rowCount(t)).toBe(before);
    expect(fake.requests.filter((r) => r.path.endsWith('/rotate'))).toHaveLength(1);
  });

  it('prints a secret it could not store, since the upstream already signs with it', async () => {
    const database = sqliteFile();
    const clock = new ManualClock();
    const config = configSchema.parse({ database });
    const opened = await openUpstreamSecrets(config, clock, captureLogs().logger);
    await opened.close(); // storage fails after the upstream call
    const out: string[] = [];
    const client = createUpstreamClient({ baseUrl: fake.baseUrl, apiKey: fake.apiKey });
    const deps = { client, secrets: opened.secrets, cipher: opened.cipher, clock, config, print: (line: string) => out.push(line) };
    const error = await registerWebhook(deps, { url: RELAY_URL, events: ['box.ready'], name: 'boxrelay' }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(SecretNotStoredError);
    const [created] = fake.endpoints();
    expect(out).toContain(created?.secret);
    expect((error as Error).message).toMatch(/put the secret printed above into BOXRELAY_SECRETS/);
    expect((error as Error).message).not.toContain(created?.secret);
  });

  it('refuses to start with no secret in the env, the file or the database', async () => {
    const config = configSchema.parse({ database: sqliteFile(), secrets: [] });
    await expect(createRelay({ config, logger: captureLogs().logger })).rejects.toBeInstanceOf(NoSecretError);
  });

  it('reports an upstream refusal with its code and requestId', async () => {
    const { deps } = await cli(sqliteFile(), new ManualClock());
    const error = await registerWebhook(deps, { url: 'http://relay.example.com/webhooks', events: ['box.ready'], name: 'x' }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(UpstreamApiError);
    expect((error as Error).message).toMatch(/400 invalid_url: .*\(requestId req_[0-9a-f]+\)/);
  });

  it('lists the endpoints as a table', async () => {
    const { deps, out } = await cli(sqliteFile(), new ManualClock());
    await listWebhooks(deps);
    expect(out).toEqual(['no webhook endpoints; create one with `boxrelay upstream register --url <public relay URL>`']);
    out.length = 0;
    const { webhook } = await registerWebhook(deps, { url: RELAY_URL, events: ['box.ready', 'box.error'], name: 'boxrelay' });
    out.length = 0;
    await listWebhooks(deps);
    expect(out).toEqual([`ID${' '.repeat(27)}NAME      URL${' '.repeat(33)}EVENTS`, `${webhook.id}  boxrelay  ${RELAY_URL}  box.ready,box.error`]);
  });
});

describe('the real CLI (spawned; run `npm run build` first)', () => {
  beforeAll(requireBuild);

  it('register, list and rotate configured by env; a lost rotate answer exits 1 with guidance; missing settings exit 2', async () => {
    const database = sqliteFile();
    const env = {
      BOXRELAY_DATABASE: database,
      BOXRELAY_UPSTREAM_BASE_URL: fake.baseUrl,
      BOXRELAY_UPSTREAM_API_KEY: fake.apiKey,
      BOXRELAY_SECRETS_ENCRYPTION_KEY: KEY,
    };
    const registered = await runCli(['upstream', 'register', '--url', RELAY_URL, '--events', 'ready,box.error'], env);
    expect(registered.stderr).toBe('');
    expect(registered.code).toBe(0);
    const [endpoint] = fake.endpoints();
    expect(endpoint).toMatchObject({ name: 'boxrelay', url: RELAY_URL, events: ['box.ready', 'box.error'] });
    const first = endpoint?.secret as string;
    expect(registered.stdout.split(first)).toHaveLength(2);
    expect(registered.stdout).toContain(`registered webhook ${endpoint?.id}`);

    const listed = await runCli(['upstream', 'list'], env);
    expect(listed).toMatchObject({ code: 0, stderr: '' });
    expect(listed.stdout).toContain(`${endpoint?.id}  boxrelay  ${RELAY_URL}  box.ready,box.error`);

    const t = await relayOn(database);
    t.clock.set(Date.now()); // the spawned CLI dates expiries by the wall clock
    expect(await statusOf(t, first)).toBe('200');

    const rotated = await runCli(['upstream', 'rotate', endpoint?.id as string, '--grace', '1h'], env);
    expect(rotated).toMatchObject({ code: 0, stderr: '' });
    const second = fake.secretOf(endpoint?.id as string) as string;
    expect(rotated.stdout).toMatch(/1 earlier database secret\(s\) of wh_[0-9a-f]{24} stay accepted until \S+Z \(grace 1h\)/);
    expect(rotated.stdout).not.toMatch(/whsec_/);
    t.clock.advance(1000);
    expect(await statusOf(t, second)).toBe('200');
    expect(await statusOf(t, first)).toBe('200');
    t.clock.advance(HOUR + 60_000);
    expect(await statusOf(t, first)).toBe('401 invalid_signature');
    expect(await statusOf(t, second)).toBe('200');

    // The fake drops the answer after rotating: the secret is lost, the CLI says so and stores nothing.
    const rows = await rowCount(t);
    fake.inject({ kind: 'drop', afterProcessing: true, method: 'POST', path: /\/rotate$/ });
    const lost = await runCli(['upstream', 'rotate', endpoint?.id as string], env);
    expect(lost.code).toBe(1);
    expect(lost.stdout).toBe('');
    expect(lost.stderr).toMatch(/^boxrelay: The response to POST \/webhooks\/wh_[0-9a-f]{24}\/rotate was lost .*boxrelay upstream list/);
    expect(await rowCount(t)).toBe(rows);
    expect(fake.requests.filter((r) => r.path.endsWith('/rotate'))).toHaveLength(2);

    const unset = await runCli(['upstream', 'list'], { BOXRELAY_UPSTREAM_BASE_URL: fake.baseUrl });
    expect(unset).toEqual({ code: 2, stdout: '', stderr: 'boxrelay: the upstream commands need BOXRELAY_UPSTREAM_API_KEY (the Sandbox Service API)\n' });

    for (const secret of [first, second]) expect(t.logs.text()).not.toContain(secret);
    expect(`${rotated.stderr}${lost.stderr}${listed.stdout}`).not.toMatch(/whsec_/);
  });
});
