import { mkdtempSync, renameSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import request from 'supertest';
import { describe, expect, it } from 'vitest';
import { SecretsFile, parseSecretsFile } from '../src/verify/secrets-file.js';
import { SecretRing, keysOf } from '../src/verify/secrets.js';
import { ManualClock } from './support/clock.js';
import { captureLogs } from './support/log-capture.js';
import { testRelay } from './support/relay.js';
import { delivery, sendRaw } from './support/sign.js';

const tmp = () => mkdtempSync(join(tmpdir(), 'boxrelay-secrets-'));

describe('secrets file', () => {
  it('parses secrets with optional expiry, ignoring blanks and comments', () => {
    expect(parseSecretsFile('# current\nwhsec_new\n\n  whsec_old   2026-11-22T10:00:00Z\nwhsec_x 2026-11-22T11:00:00.500+01:00\n')).toEqual([
      { value: 'whsec_new' },
      { value: 'whsec_old', expiresAt: Date.parse('2026-11-22T10:00:00Z') },
      { value: 'whsec_x', expiresAt: Date.parse('2026-11-22T10:00:00.500Z') },
    ]);
  });

  it('names the bad line without echoing the secret', () => {
    for (const text of ['whsec_secretvalue tomorrow', 'whsec_secretvalue 2026-11-22T10:00:00', 'whsec_secretvalue 2026-11-22T10:00:00Z extra']) {
      expect(() => parseSecretsFile(text)).toThrow(/^line 1: /);
      try {
        parseSecretsFile(text);
      } catch (error) {
        expect((error as Error).message).not.toContain('secretvalue');
      }
    }
  });

  it('keeps the last good set when the file becomes invalid or unreadable, and logs it once', () => {
    const dir = tmp();
    const path = join(dir, 'secrets');
    writeFileSync(path, 'whsec_one\n');
    const logs = captureLogs();
    const file = new SecretsFile(path, { logger: logs.logger });
    file.load();
    writeFileSync(path, 'whsec_two not-a-time\n');
    expect(file.refresh()).toBe(false);
    expect(file.refresh()).toBe(false);
    expect(file.current()).toEqual([{ value: 'whsec_one' }]);
    renameSync(path, join(dir, 'gone'));
    expect(file.refresh()).toBe(false);
    expect(logs.entries().filter((e) => e.level === 50)).toHaveLength(2);
    expect(logs.text()).not.toContain('whsec_two');
    writeFileSync(path, 'whsec_three\n');
    expect(file.refresh()).toBe(true);
    expect(file.current()).toEqual([{ value: 'whsec_three' }]);
  });

  it('follows a Kubernetes-style symlink swap', () => {
    const dir = tmp();
    writeFileSync(join(dir, 'v1'), 'whsec_one\n');
    writeFileSync(join(dir, 'v2'), 'whsec_two\n');
    symlinkSync(join(dir, 'v1'), join(dir, '..data'));
    const file = new SecretsFile(join(dir, '..data'), { logger: captureLogs().logger });
    file.load();
    symlinkSync(join(dir, 'v2'), join(dir, '..data_tmp'));
    renameSync(join(dir, '..data_tmp'), join(dir, '..data'));
    expect(file.refresh()).toBe(true);
    expect(file.current()).toEqual([{ value: 'whsec_two' }]);
  });
});

describe('secret ring', () => {
  it('orders env, file, then database secrets into slots and drops expired ones', async () => {
    const clock = new ManualClock(1_000_000);
    const ring = new SecretRing({
      env: ['whsec_env'],
      file: { current: () => [{ value: 'whsec_file_old', expiresAt: 999_999 }, { value: 'whsec_file' }] },
      database: { list: async () => [{ value: 'whsec_db' }] },
      clock,
    });
    await ring.refreshDatabase();
    expect(ring.accepted().map((s) => [s.value, s.slot, s.origin])).toEqual([
      ['whsec_env', 0, 'env'],
      ['whsec_file', 1, 'file'],
      ['whsec_db', 2, 'database'],
    ]);
  });

  it('re-reads the database on a miss, at most once a second', async () => {
    const clock = new ManualClock(5_000_000);
    let stored: { value: string }[] = [];
    let reads = 0;
    const ring = new SecretRing({ env: ['whsec_env'], database: { list: async () => (reads++, stored) }, clock });
    await ring.refreshDatabase();
    stored = [{ value: 'whsec_rotated' }];
    const d = delivery({ timestamp: 0, secret: 'whsec_rotated' });
    const verify = () => ring.verify(d.id, '0', d.headers['X-Service-Signature'] as string, d.body);
    await expect(verify()).rejects.toMatchObject({ code: 'invalid_signature' });
    clock.advance(1000);
    await expect(verify()).resolves.toBe(1);
    expect(reads).toBe(2);
    const wrong = delivery({ timestamp: 0, secret: 'whsec_unknown' });
    await expect(ring.verify(wrong.id, '0', wrong.headers['X-Service-Signature'] as string, wrong.body)).rejects.toMatchObject({ code: 'invalid_signature' });
    expect(reads).toBe(2);
  });

  it('lets concurrent misses share one database read, and answers 503 when that read fails', async () => {
    const clock = new ManualClock(5_000_000);
    let release: () => void = () => undefined;
    let reads = 0;
    let failing = false;
    const database = {
      list: async () => {
        reads++;
        if (failing) throw new Error('connection lost');
        await new Promise<void>((resolve) => (release = resolve));
        return [{ value: 'whsec_rotated' }];
      },
    };
    const ring = new SecretRing({ env: ['whsec_env'], database, clock });
    const signed = [1, 2, 3].map(() => delivery({ timestamp: 0, secret: 'whsec_rotated' }));
    const verifying = signed.map((d) => ring.verify(d.id, '0', d.headers['X-Service-Signature'] as string, d.body));
    await Promise.resolve();
    release();
    await expect(Promise.all(verifying)).resolves.toEqual([1, 1, 1]);
    expect(reads).toBe(1);

    failing = true;
    clock.advance(1000);
    const unknown = delivery({ timestamp: 0, secret: 'whsec_unknown' });
    await expect(ring.verify(unknown.id, '0', unknown.headers['X-Service-Signature'] as string, unknown.body)).rejects.toMatchObject({
      code: 'storage_unavailable',
    });
    expect(ring.accepted().map((s) => s.value)).toEqual(['whsec_env', 'whsec_rotated']); // the last set is kept
  });

  it('derives the base64 key only when what follows whsec_ is base64', () => {
    expect(keysOf('whsec_dGVzdA==')).toHaveLength(2);
    expect(keysOf('whsec_not*base64')).toHaveLength(1);
    expect(keysOf('plain-secret')).toHaveLength(1);
  });
});

describe('rotation through the secrets file on a running relay', () => {
  it('accepts a secret added to the file, refuses one past its expiry, without restart', async () => {
    const dir = tmp();
    const path = join(dir, 'secrets');
    writeFileSync(path, 'whsec_current\n');
    const t = await testRelay({ secrets: [], secretsFile: path, secretsReloadMs: 5 });
    await t.relay.start();
    const post = async (secret: string) => {
      const d = delivery({ timestamp: t.clock.seconds, secret });
      return (await sendRaw(request(t.relay.publicApp).post('/webhooks').set(d.headers), d.body)).status;
    };
    expect(await post('whsec_current')).toBe(200);
    expect(await post('whsec_next')).toBe(401);

    const expiry = new Date(t.clock.now() + 60_000).toISOString();
    const reloaded = t.logs.waitFor((e) => e.msg === 'secrets file reloaded');
    writeFileSync(path, `whsec_next\nwhsec_current ${expiry}\n`);
    await reloaded;
    expect(await post('whsec_next')).toBe(200);
    expect(await post('whsec_current')).toBe(200);

    t.clock.advance(60_001);
    expect(await post('whsec_current')).toBe(401);
    expect(await post('whsec_next')).toBe(200);
    expect(t.logs.text()).not.toMatch(/whsec_(current|next)/);
    await t.close();
  });
});
