import { existsSync } from 'node:fs';
import BetterSqlite3 from 'better-sqlite3';
import pg from 'pg';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { postgresSchema, sqliteFile } from './support/databases.js';
import { killIfRunning, requireBuild, runCli, spawnRelay, type RelayProcess } from './support/process.js';
import { SECRET, delivery } from './support/sign.js';

beforeAll(requireBuild);

let relays: RelayProcess[] = [];
afterEach(async () => {
  for (const relay of relays) await killIfRunning(relay);
  relays = [];
});

async function serve(file: string): Promise<RelayProcess> {
  const relay = await spawnRelay({ BOXRELAY_SECRETS: SECRET, BOXRELAY_DATABASE: file });
  relays.push(relay);
  return relay;
}

async function post(relay: RelayProcess, id?: string): Promise<{ status: number; body: unknown }> {
  const d = delivery({ id, timestamp: Math.floor(Date.now() / 1000) });
  const response = await fetch(`http://127.0.0.1:${relay.port}/webhooks`, { method: 'POST', headers: d.headers, body: d.body });
  return { status: response.status, body: await response.json() };
}

function deliveriesIn(file: string): string[] {
  const sqlite = new BetterSqlite3(file, { readonly: true });
  try {
    return (sqlite.prepare('SELECT id FROM deliveries ORDER BY id').all() as { id: string }[]).map((row) => row.id);
  } finally {
    sqlite.close();
  }
}

const inUse = (file: string) =>
  `boxrelay: another boxrelay process is serving ${file} (BOXRELAY_DATABASE): one process writes a SQLite file at a time; ` +
  'stop it first (or use PostgreSQL for several replicas)\n';

describe('one writer per SQLite file', () => {
  it('a second serve and a store copy exit 2 naming the file; backup and dead-letters list work beside the relay', async () => {
    const file = sqliteFile();
    const relay = await serve(file);
    const first = await post(relay);
    expect(first.status).toBe(200);

    const second = await runCli(['serve'], { BOXRELAY_SECRETS: SECRET, BOXRELAY_DATABASE: file, PORT: '0', BOXRELAY_INTERNAL_PORT: '0', HOST: '127.0.0.1' });
    expect(second).toEqual({ code: 2, stdout: '', stderr: inUse(file) });

    const target = await postgresSchema();
    const copy = await runCli(['store', 'copy', '--to', target], { BOXRELAY_DATABASE: file });
    expect(copy).toEqual({ code: 2, stdout: '', stderr: inUse(file) });
    // Nothing was written to the target: not even its migrations.
    const client = new pg.Client(target);
    await client.connect();
    try {
      const { rows } = await client.query<{ tables: number }>('SELECT count(*)::int AS tables FROM information_schema.tables WHERE table_schema = current_schema()');
      expect(rows[0]!.tables).toBe(0);
    } finally {
      await client.end();
    }

    // The first relay still serves, alone.
    expect((await post(relay)).status).toBe(200);
    expect(relay.child.exitCode).toBeNull();

    const backupFile = `${file}.backup`;
    const backup = await runCli(['backup', backupFile], { BOXRELAY_DATABASE: file });
    expect(backup.code).toBe(0);
    expect(JSON.parse(backup.stdout)).toMatchObject({ ok: true, file: backupFile, deliveries: 2 });
    const list = await runCli(['dead-letters', 'list'], { BOXRELAY_DATABASE: file });
    expect(list).toEqual({ code: 0, stdout: 'ID\tSINK\tATTEMPTS\tFAILED AT\tEVENT\tLAST ERROR\n', stderr: '' });
    expect(deliveriesIn(file)).toHaveLength(2);
  });

  it('a relay killed with SIGKILL leaves no lock behind: the next serve starts at once and keeps its dedup history', async () => {
    const file = sqliteFile();
    const killed = await serve(file);
    const d = await post(killed);
    expect(d).toMatchObject({ status: 200, body: { duplicate: false } });
    killed.child.kill('SIGKILL');
    expect(await killed.exited).toBeNull();
    expect(existsSync(`${file}-lock`)).toBe(true);

    const next = await serve(file);
    const again = await post(next, (d.body as { id: string }).id);
    expect(again).toEqual({ status: 200, body: { ok: true, id: (d.body as { id: string }).id, duplicate: true } });
  });
});
