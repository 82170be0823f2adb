import { request as httpRequest } from 'node:http';
import { once } from 'node:events';
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

  it('refuses to serve without any signing secret', async () => {
    const result = await runCli(['serve'], { BOXRELAY_DATABASE: sqliteFile(), PORT: '0', BOXRELAY_INTERNAL_PORT: '0' });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('no signing secret');
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
