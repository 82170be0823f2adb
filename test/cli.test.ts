import { request as httpRequest } from 'node:http';
import { once } from 'node:events';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { migrations } from '../migrations/index.js';
import { sqliteFile } from './support/databases.js';
import { killIfRunning, requireBuild, runCli, spawnRelay, type RelayProcess } from './support/process.js';
import { SECRET, delivery } from './support/sign.js';

beforeAll(requireBuild);

let relay: RelayProcess | undefined;
afterEach(async () => {
  await killIfRunning(relay);
  relay = undefined;
});

describe('boxrelay CLI', () => {
  it('serve accepts a send-test delivery and refuses a wrong-secret one', async () => {
    relay = await spawnRelay({ BOXRELAY_SECRETS: SECRET, BOXRELAY_DATABASE: sqliteFile() });
    const url = `http://127.0.0.1:${relay.port}/webhooks`;
    const good = await runCli(['send-test', '--url', url, '--secret', SECRET, '--type', 'box.error', '--box', 'bx_cli']);
    expect(good.code).toBe(0);
    expect(good.stdout).toMatch(/^200 \{"ok":true,"id":"evt_[0-9a-f]{32}","duplicate":false\}/);
    const bad = await runCli(['send-test', '--url', url, '--secret', 'whsec_wrong']);
    expect(bad.code).toBe(1);
    expect(bad.stdout).toMatch(/^401 .*"code":"invalid_signature"/);
    const logged = await relay.waitForLog((e) => e.outcome === 'invalid_signature');
    expect(logged).toMatchObject({ msg: 'delivery', level: 40 });
    expect(relay.lines.join('\n')).not.toContain(SECRET);
    const ready = await fetch(`http://127.0.0.1:${relay.internalPort}/readyz`);
    expect(await ready.json()).toEqual({ ok: true, checks: { storage: 'ok' } });
  });

  it('stops on SIGTERM after finishing the request in flight', async () => {
    relay = await spawnRelay({ BOXRELAY_SECRETS: SECRET, BOXRELAY_DATABASE: sqliteFile() });
    const d = delivery({ timestamp: Math.floor(Date.now() / 1000) });
    const req = httpRequest({ host: '127.0.0.1', port: relay.port, method: 'POST', path: '/webhooks', headers: { ...d.headers, 'Content-Length': d.body.length, Expect: '100-continue' } });
    req.flushHeaders();
    // "100 Continue" proves the server is handling the request before the signal arrives.
    await once(req, 'continue');
    relay.child.kill('SIGTERM');
    await relay.waitForLog((e) => e.msg === 'shutting down');
    req.end(d.body);
    const [response] = (await once(req, 'response')) as [import('node:http').IncomingMessage];
    let body = '';
    for await (const chunk of response) body += chunk;
    expect(response.statusCode).toBe(200);
    expect(JSON.parse(body)).toEqual({ ok: true, id: d.id, duplicate: false });
    expect(await relay.exited).toBe(0);
    expect(relay.lines.some((l) => l.includes('boxrelay stopped'))).toBe(true);
  });

  it('refuses invalid configuration with one line per problem and a non-zero exit', async () => {
    const result = await runCli(['serve'], { BOXRELAY_SECRETS: SECRET, PORT: 'x', BOXRELAY_NATS_MODE: 'fast' });
    expect(result.code).toBe(2);
    const lines = result.stderr.trim().split('\n');
    expect(lines).toHaveLength(2);
    expect(lines[0]).toMatch(/^boxrelay: invalid configuration: PORT: /);
    expect(lines[1]).toMatch(/^boxrelay: invalid configuration: BOXRELAY_NATS_MODE: /);
  });

  it('refuses an admin token shorter than 32 characters: exit 2 naming BOXRELAY_ADMIN_TOKEN, before listening or opening the database', async () => {
    const database = sqliteFile();
    const result = await runCli(['serve'], { BOXRELAY_SECRETS: SECRET, BOXRELAY_DATABASE: database, BOXRELAY_ADMIN_TOKEN: 'x', PORT: '0', BOXRELAY_INTERNAL_PORT: '0' });
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(/^boxrelay: invalid configuration: BOXRELAY_ADMIN_TOKEN: must be at least 32 characters \(make one with `openssl rand -hex 32`\)/);
    expect(result.stdout).not.toContain('boxrelay listening');
    expect(existsSync(database)).toBe(false);
  });

  it('refuses to serve without any signing secret: exit 2, naming the variables with an example', async () => {
    const result = await runCli(['serve'], { BOXRELAY_DATABASE: sqliteFile(), PORT: '0', BOXRELAY_INTERNAL_PORT: '0' });
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('no signing secret');
    expect(result.stderr).toContain('BOXRELAY_SECRETS=whsec_');
    expect(result.stderr).toContain('BOXRELAY_SECRETS_FILE=/');
  });

  it('migrate applies the migrations once', async () => {
    const database = sqliteFile();
    const first = await runCli(['migrate'], { BOXRELAY_DATABASE: database });
    const applied = Object.keys(migrations).map((name) => `${name}: Success\n`).join('');
    expect(applied).toMatch(/^001_initial: Success\n/);
    expect(first).toMatchObject({ code: 0, stdout: applied });
    const second = await runCli(['migrate'], { BOXRELAY_DATABASE: database });
    expect(second).toMatchObject({ code: 0, stdout: 'database is up to date\n' });
  });
});

describe('boxrelay CLI: version and errors', () => {
  it('--version prints the version of package.json', async () => {
    const { version } = JSON.parse(readFileSync(join(import.meta.dirname, '..', 'package.json'), 'utf8')) as { version: string };
    expect(await runCli(['--version'])).toEqual({ code: 0, stdout: `${version}\n`, stderr: '' });
  });

  it.each([
    [['replay', '--since', '2026-11-21T10:00:00Z'], 'replay'],
    [['dead-letters', 'retry', '--all'], 'dead-letters retry'],
    [['dead-letters', 'retry', '1'], 'dead-letters retry'],
  ])('%j without any sink exits 2 naming the sink settings, and touches no database', async (args, command) => {
    const database = sqliteFile();
    const result = await runCli(args, { BOXRELAY_DATABASE: database });
    expect(result.code).toBe(2);
    expect(result.stdout).toBe('');
    expect(result.stderr).toMatch(new RegExp(`^boxrelay: ${command} needs the server's sinks: set a bus URL \\(e\\.g\\. BOXRELAY_NATS_URL=.*\\) or BOXRELAY_HOOKS_FILE `));
    expect(existsSync(database)).toBe(false);
  });

  it.each([[['upstream', 'list']], [['reconcile']]])('%j without the upstream settings exits 2 naming them', async (args) => {
    const result = await runCli(args, { BOXRELAY_DATABASE: sqliteFile() });
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('BOXRELAY_UPSTREAM_BASE_URL and BOXRELAY_UPSTREAM_API_KEY');
  });

  it('a bad setting exits 2 naming the variable, or the config file and key, with a valid value', async () => {
    const env = { BOXRELAY_SECRETS: SECRET, BOXRELAY_DATABASE: sqliteFile() };
    const tolerance = await runCli(['serve'], { ...env, BOXRELAY_TOLERANCE_SECONDS: 'abc' });
    expect(tolerance.code).toBe(2);
    expect(tolerance.stderr).toBe(
      'boxrelay: invalid configuration: BOXRELAY_TOLERANCE_SECONDS: expected a number; e.g. BOXRELAY_TOLERANCE_SECONDS=300\n',
    );
    const file = join(dirname(env.BOXRELAY_DATABASE), 'boxrelay.yaml');
    writeFileSync(file, 'retentionDays: a month\n');
    const fromFile = await runCli(['migrate'], { ...env, BOXRELAY_CONFIG: file });
    expect(fromFile.code).toBe(2);
    expect(fromFile.stderr).toBe(`boxrelay: invalid configuration: BOXRELAY_CONFIG (${file}) retentionDays: expected a number; e.g. retentionDays: 30\n`);
    const key = await runCli(['serve'], { ...env, PORT: '0', BOXRELAY_INTERNAL_PORT: '0', BOXRELAY_SECRETS_ENCRYPTION_KEY: 'base64:abc' });
    expect(key.code).toBe(2);
    expect(key.stderr).toMatch(/^boxrelay: BOXRELAY_SECRETS_ENCRYPTION_KEY: /);
  });

  it('a database that cannot be opened is named: BOXRELAY_DATABASE and the path or host, never the password', async () => {
    const blocker = sqliteFile();
    writeFileSync(blocker, 'a file where a directory should be');
    const path = join(blocker, 'boxrelay.db');
    const sqlite = await runCli(['migrate'], { BOXRELAY_DATABASE: path });
    expect(sqlite.code).toBe(1);
    expect(sqlite.stderr).toMatch(new RegExp(`^boxrelay: cannot open the database \\(BOXRELAY_DATABASE: ${path}\\): `));
    const notADatabase = await runCli(['dead-letters', 'list'], { BOXRELAY_DATABASE: blocker });
    expect(notADatabase.stderr).toBe(`boxrelay: cannot open the database (BOXRELAY_DATABASE: ${blocker}): file is not a database\n`);
    const postgres = await runCli(['serve'], { BOXRELAY_SECRETS: SECRET, BOXRELAY_DATABASE: 'postgres://relay:pa55word@127.0.0.1:1/boxrelay' });
    expect(postgres.code).toBe(1);
    expect(postgres.stderr).toMatch(/^boxrelay: cannot open the database \(BOXRELAY_DATABASE: PostgreSQL at 127\.0\.0\.1:1\/boxrelay\): /);
    expect(postgres.stderr).not.toContain('pa55word');
  });
});
