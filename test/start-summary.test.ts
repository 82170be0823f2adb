import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startSummary } from '../src/cli/start-summary.js';
import { configSchema } from '../src/config/schema.js';
import { packageVersion } from '../src/package-version.js';
import { sqliteFile } from './support/databases.js';
import { killIfRunning, requireBuild, spawnRelay, type RelayProcess } from './support/process.js';
import { SECRET } from './support/sign.js';

const ADMIN_TOKEN = 'start-summary-admin-token-0123456789abcdef';

describe('what serve tells a person once it listens', () => {
  const ports = { port: 8080, internalPort: 9091 };

  it('with nothing configured: both ports, the SQLite file, that events go nowhere and how to add a sink, that the admin API is off and why', () => {
    const lines = startSummary(configSchema.parse({}), ports, '1.0.0');
    expect(lines[0]).toBe('version 1.0.0 listening: webhooks on http://127.0.0.1:8080/webhooks (port 8080); /metrics, /admin and /console on http://127.0.0.1:9091 (port 9091)');
    expect(lines[1]).toBe(`data kept in SQLite file ${resolve('./data/boxrelay.db')}`);
    expect(lines[2]).toMatch(/^no sinks: events are stored and go nowhere; add one with BOXRELAY_NATS_URL .* BOXRELAY_HOOKS_FILE/);
    expect(lines[3]).toMatch(/^admin API and console off \(\/admin and \/console answer 404\): set BOXRELAY_ADMIN_TOKEN to 32 or more characters/);
  });

  it('with sinks and a token: each sink by name, the console’s address; a PostgreSQL password and the token never shown', () => {
    const config = configSchema.parse({
      host: '10.0.0.5',
      natsUrl: 'nats://127.0.0.1:4222',
      database: 'postgres://relay:db-password-71c2@db:5432/boxrelay',
      adminToken: ADMIN_TOKEN,
      hooks: [{ name: 'alerts', url: 'https://hooks.example/box' }],
      accounts: [{ name: 'staging', secrets: ['whsec_c3RhZ2luZy1zZWNyZXQ='] }],
    });
    const text = startSummary(config, ports, '1.0.0').join('\n');
    expect(text).toContain('webhooks on http://10.0.0.5:8080/webhooks (accounts: /webhooks/staging) (port 8080)');
    expect(text).not.toContain('c3RhZ2luZy1zZWNyZXQ');
    expect(text).toContain('data kept in PostgreSQL postgres://relay:***@db:5432/boxrelay');
    expect(text).toContain('sinks on: nats, hook alerts');
    expect(text).toContain('admin API and console on: http://127.0.0.1:9091/console (sign in with BOXRELAY_ADMIN_TOKEN)');
    expect(text).not.toContain('db-password-71c2');
    expect(text).not.toContain(ADMIN_TOKEN);
    expect(text).not.toContain('go nowhere');
  });
});

describe('docs/getting-started.md', () => {
  it('shows the lines a relay with the defaults prints (the data line by its beginning: the path is the reader’s)', () => {
    const shown = readFileSync(join(import.meta.dirname, '..', 'docs', 'getting-started.md'), 'utf8')
      .split('\n')
      .filter((line) => line.startsWith('boxrelay: '));
    const printed = startSummary(configSchema.parse({}), { port: 8080, internalPort: 9091 }, packageVersion()).map((line) => `boxrelay: ${line}`);
    expect(shown).toHaveLength(printed.length);
    shown.forEach((line, index) => {
      if (line.startsWith('boxrelay: data kept in SQLite file ')) expect(printed[index]).toMatch(/^boxrelay: data kept in SQLite file \//);
      else expect(line).toBe(printed[index]);
    });
  });
});

describe('boxrelay serve, as a person starts it', () => {
  beforeAll(requireBuild);
  let relay: RelayProcess | undefined;
  afterEach(async () => {
    await killIfRunning(relay);
    relay = undefined;
  });

  it('prints the summary on stderr, in plain text, with the ports it really listens on', async () => {
    relay = await spawnRelay({ BOXRELAY_SECRETS: SECRET, BOXRELAY_DATABASE: sqliteFile() });
    const first = await relay.waitForLog((entry) => String(entry.msg).startsWith('boxrelay: version '));
    expect(first.msg).toContain(`webhooks on http://127.0.0.1:${relay.port}/webhooks`);
    expect(first.msg).toContain(`on http://127.0.0.1:${relay.internalPort} (port ${relay.internalPort})`);
    await relay.waitForLog((entry) => String(entry.msg).startsWith('boxrelay: no sinks: events are stored and go nowhere'));
    await relay.waitForLog((entry) => String(entry.msg).startsWith('boxrelay: admin API and console off'));
  });

  it('names the console’s address when the admin token is set, never the token', async () => {
    relay = await spawnRelay({ BOXRELAY_SECRETS: SECRET, BOXRELAY_DATABASE: sqliteFile(), BOXRELAY_ADMIN_TOKEN: ADMIN_TOKEN });
    const admin = await relay.waitForLog((entry) => String(entry.msg).startsWith('boxrelay: admin API and console on'));
    expect(admin.msg).toContain(`http://127.0.0.1:${relay.internalPort}/console`);
    expect(relay.lines.join('\n')).not.toContain(ADMIN_TOKEN);
  });
});
