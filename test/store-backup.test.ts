import { existsSync, readdirSync, statSync } from 'node:fs';
import { dirname } from 'node:path';
import BetterSqlite3 from 'better-sqlite3';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { POSTGRES_URL, sqliteFile } from './support/databases.js';
import { killIfRunning, requireBuild, runCli, spawnRelay, type RelayProcess } from './support/process.js';
import { SECRET, delivery } from './support/sign.js';
import { preloaded } from './support/stored-deliveries.js';

beforeAll(requireBuild);

let relay: RelayProcess | undefined;
afterEach(async () => {
  await killIfRunning(relay);
  relay = undefined;
});

interface Sent {
  id: string;
  status: number;
  /** Answered before the backup command was started / after it ended. */
  before: boolean;
  after: boolean;
}

describe('boxrelay backup', () => {
  it('copies a consistent, checked database while the relay keeps answering 200', async () => {
    const file = sqliteFile();
    const preload = 12_000;
    await preloaded(file, preload);
    relay = await spawnRelay({ BOXRELAY_SECRETS: SECRET, BOXRELAY_DATABASE: file });
    const url = `http://127.0.0.1:${relay.port}/webhooks`;

    const sent: Sent[] = [];
    let phase = 'before' as 'before' | 'during' | 'after';
    let sending = true;
    const sender = (async () => {
      while (sending) {
        const d = delivery({ timestamp: Math.floor(Date.now() / 1000) });
        const response = await fetch(url, { method: 'POST', headers: d.headers, body: d.body });
        await response.arrayBuffer();
        sent.push({ id: d.id, status: response.status, before: phase === 'before', after: phase === 'after' });
      }
    })();
    // Some deliveries are stored before the backup starts.
    while (sent.length < 5) await new Promise((resolve) => setImmediate(resolve));

    phase = 'during';
    const copyFile = `${file}.backup`;
    const backup = await runCli(['backup', copyFile], { BOXRELAY_DATABASE: file });
    phase = 'after';
    const answeredAfter = sent.length;
    while (sent.length < answeredAfter + 2) await new Promise((resolve) => setImmediate(resolve));
    sending = false;
    await sender;

    expect(backup.stderr).toBe('');
    expect(backup.code).toBe(0);
    expect(backup.stdout.endsWith('\n')).toBe(true);
    const summary = JSON.parse(backup.stdout) as Record<string, unknown>;
    expect(Object.keys(summary)).toEqual(['ok', 'file', 'bytes', 'deliveries']);
    expect(summary).toMatchObject({ ok: true, file: copyFile, bytes: statSync(copyFile).size });

    // Deliveries kept being answered 200, also while the backup ran.
    expect(sent.filter((s) => s.status !== 200)).toEqual([]);
    expect(sent.filter((s) => !s.before && !s.after).length).toBeGreaterThan(0);

    // The copy is whole (one file, no WAL beside it), passes SQLite's check, and holds the deliveries it counted:
    // every one answered before the backup began, none sent after it ended.
    expect(existsSync(`${copyFile}-wal`)).toBe(false);
    expect(readdirSync(dirname(copyFile)).filter((name) => name.includes('.partial'))).toEqual([]);
    const copy = new BetterSqlite3(copyFile, { readonly: true });
    try {
      expect(copy.pragma('integrity_check')).toEqual([{ integrity_check: 'ok' }]);
      const ids = new Set((copy.prepare('SELECT id FROM deliveries').all() as { id: string }[]).map((row) => row.id));
      expect(ids.size).toBe(summary.deliveries);
      expect(sent.filter((s) => s.before && !ids.has(s.id))).toEqual([]);
      expect(sent.filter((s) => s.after && ids.has(s.id))).toEqual([]);
      const sentCopied = sent.filter((s) => ids.has(s.id)).length;
      expect(ids.size).toBe(preload + sentCopied);
    } finally {
      copy.close();
    }
  });

  it('on PostgreSQL exits 2 naming pg_dump, and writes no file', async () => {
    const copyFile = `${sqliteFile()}.backup`;
    const result = await runCli(['backup', copyFile], { BOXRELAY_DATABASE: POSTGRES_URL });
    expect(result).toEqual({
      code: 2,
      stdout: '',
      stderr:
        'boxrelay: backup copies a SQLite database; BOXRELAY_DATABASE names PostgreSQL: back it up with pg_dump ' +
        '(e.g. pg_dump --format=custom --file=boxrelay.dump "$BOXRELAY_DATABASE")\n',
    });
    expect(existsSync(copyFile)).toBe(false);
  });

  it('refuses to write the copy over the database itself (exit 2), leaving it untouched', async () => {
    const file = sqliteFile();
    await preloaded(file, 3);
    const before = statSync(file);
    const result = await runCli(['backup', file], { BOXRELAY_DATABASE: file });
    expect(result).toEqual({ code: 2, stdout: '', stderr: `boxrelay: the backup file ${file} is the database itself (BOXRELAY_DATABASE); name another file\n` });
    expect(statSync(file).mtimeMs).toBe(before.mtimeMs);
  });
});
