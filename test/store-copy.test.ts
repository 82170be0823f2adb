import { randomBytes } from 'node:crypto';
import { existsSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import BetterSqlite3 from 'better-sqlite3';
import { sql } from 'kysely';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { COPIED } from '../src/store/copy/tables.js';
import { databaseLocation, openDatabase } from '../src/store/engines/database.js';
import { ADMIN_TOKEN, fetchAdmin } from './support/admin.js';
import { postgresSchema, sqliteFile } from './support/databases.js';
import { startFakeSandbox, type FakeSandbox } from './support/fake-sandbox.js';
import { hookServer, type HookServer } from './support/hook-server.js';
import { killIfRunning, requireBuild, runCli, spawnRelay, type RelayProcess } from './support/process.js';
import { SECRET, delivery } from './support/sign.js';

beforeAll(requireBuild);

let relays: RelayProcess[] = [];
let servers: { close(): Promise<void> }[] = [];
afterEach(async () => {
  for (const relay of relays) await killIfRunning(relay);
  for (const server of servers) await server.close();
  relays = [];
  servers = [];
});

async function serve(env: Record<string, string>): Promise<RelayProcess> {
  const relay = await spawnRelay(env);
  relays.push(relay);
  return relay;
}

async function stop(relay: RelayProcess): Promise<void> {
  relay.child.kill('SIGTERM');
  expect(await relay.exited).toBe(0);
}

async function post(relay: RelayProcess, options: { id?: string; secret: string; boxId?: string }) {
  const d = delivery({ ...options, timestamp: Math.floor(Date.now() / 1000) });
  const response = await fetch(`http://127.0.0.1:${relay.port}/webhooks`, { method: 'POST', headers: d.headers, body: d.body });
  return { id: d.id, status: response.status, body: (await response.json()) as Record<string, unknown> };
}

function admin(relay: RelayProcess) {
  const call = async (method: string, path: string) => {
    const response = await fetchAdmin(relay.internalPort, method, path);
    expect(response.status, `${method} ${path}`).toBeLessThan(300);
    return response.body as Record<string, unknown>;
  };
  return {
    get: (path: string) => call('GET', path),
    post: (path: string) => call('POST', path),
    async sinks(): Promise<Record<string, { paused: boolean; pending: number; deadLetters: number }>> {
      const { sinks } = (await call('GET', '/sinks')) as { sinks: { name: string; paused: boolean; pending: number; deadLetters: number }[] };
      return Object.fromEntries(sinks.map((s) => [s.name, s]));
    },
  };
}

/** Waits for a state another process reaches (it sends no event this test could await). */
async function until<T>(what: string, read: () => T | Promise<T>, done: (value: T) => boolean): Promise<T> {
  let last: T | undefined;
  for (let i = 0; i < 600; i++) {
    last = await read();
    if (done(last)) return last;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`gave up waiting for ${what}; last seen: ${JSON.stringify(last)}`);
}

function sqliteRows(file: string, query: string): Record<string, unknown>[] {
  const sqlite = new BetterSqlite3(file, { readonly: true });
  try {
    return sqlite.prepare(query).all() as Record<string, unknown>[];
  } finally {
    sqlite.close();
  }
}

const orderOf = (key: readonly string[]) => key.join(', ');

/** Every copied table of each side, row by row in key order. */
async function tablesOf(url: string): Promise<Record<string, Record<string, unknown>[]>> {
  const database = openDatabase({ url });
  try {
    const tables: Record<string, Record<string, unknown>[]> = {};
    for (const { table, key } of COPIED) {
      const { rows } = await sql<Record<string, unknown>>`SELECT * FROM ${sql.table(table)} ORDER BY ${sql.raw(orderOf(key))}`.execute(database.kysely);
      tables[table] = rows;
    }
    return tables;
  } finally {
    await database.close();
  }
}

/** The count table: each line's kind, source and target. */
function parseCounts(stdout: string): Record<string, [number, number]> {
  const [header, ...lines] = stdout.trimEnd().split('\n');
  expect(header).toMatch(/^KIND\s+SOURCE\s+TARGET$/);
  return Object.fromEntries(
    lines.map((line) => {
      const match = /^(.+?)\s+(\d+)\s+(\d+)$/.exec(line)!;
      return [match[1]!, [Number(match[2]), Number(match[3])]];
    }),
  );
}

const idsOf = (requests: { headers: Record<string, unknown> }[]) => requests.map((r) => r.headers['webhook-id'] as string).sort();

describe('boxrelay store copy', () => {
  it('moves a SQLite relay to PostgreSQL, where relays continue it: dedup, pending work once, dead letters, pauses, reconcile state, secrets', { timeout: 90_000 }, async () => {
    const file = sqliteFile();
    let alertsUp = false;
    const alerts = await hookServer(() => (alertsUp ? 200 : 500));
    const audit = await hookServer(() => 400);
    const held = await hookServer(() => 200);
    const fake: FakeSandbox = await startFakeSandbox();
    servers.push(alerts, audit, held, fake);
    const hooksFile = join(dirname(file), 'hooks.yaml');
    const hook = (name: string, server: HookServer) => ({ name, url: server.url, events: ['box.*'], pauseAfter: '0', timeoutMs: 2000 });
    writeFileSync(hooksFile, JSON.stringify([hook('alerts', alerts), hook('audit', audit), hook('held', held)]));
    const env = {
      BOXRELAY_HOOKS_FILE: hooksFile,
      BOXRELAY_ADMIN_TOKEN: ADMIN_TOKEN,
      BOXRELAY_SECRETS_ENCRYPTION_KEY: `base64:${randomBytes(32).toString('base64')}`,
      BOXRELAY_UPSTREAM_BASE_URL: fake.baseUrl,
      BOXRELAY_UPSTREAM_API_KEY: fake.apiKey,
      BOXRELAY_RECONCILE_INTERVAL: '0',
      BOXRELAY_OUTBOX_POLL_MS: '200',
    };

    // The only signing secret comes from the upstream, stored (encrypted) in the database.
    const register = await runCli(['upstream', 'register', '--url', 'https://relay.example.com/webhooks'], { ...env, BOXRELAY_DATABASE: file });
    expect(register.code, register.stderr).toBe(0);
    const secret = fake.endpoints()[0]!.secret;
    expect(sqliteRows(file, 'SELECT secret FROM secrets')[0]!.secret).toMatch(/^enc:v1:/);

    const sqliteRelay = await serve({ ...env, BOXRELAY_DATABASE: file });
    await admin(sqliteRelay).post('/sinks/held/pause');
    // Reconciliation state: a run, a box it repaired, the event it synthesized.
    fake.setBox({ id: 'bx_rec', name: 'rec-1', state: 'ready', updatedAt: new Date().toISOString() });
    const reconcile = await runCli(['reconcile'], { ...env, BOXRELAY_DATABASE: file });
    expect(reconcile.code, reconcile.stderr).toBe(0);
    const first = await post(sqliteRelay, { secret, boxId: 'bx_one' });
    const second = await post(sqliteRelay, { secret, boxId: 'bx_two' });
    expect([first.status, second.status]).toEqual([200, 200]);

    // alerts failed its first attempts and waits for a scheduled retry; audit refused (dead letters):
    // outbox rows. held is paused: its events wait in the log, after its cursors.
    await until(
      'the fan-out to settle',
      () => sqliteRows(file, "SELECT sink, status, attempts, lease_owner FROM outbox ORDER BY sink, id"),
      (rows) =>
        rows.length === 6 &&
        rows.every((r) => r.lease_owner === null && (r.sink === 'alerts' ? r.status === 'pending' && r.attempts === 3 : r.sink === 'audit' && r.status === 'dead')),
    );
    expect((await admin(sqliteRelay).sinks()).held).toMatchObject({ paused: true, pending: 3 });
    const scheduled = sqliteRows(file, "SELECT next_attempt_at FROM outbox WHERE sink = 'alerts'");
    expect(scheduled.every((r) => (r.next_attempt_at as number) > Date.now() + 60_000)).toBe(true);
    await stop(sqliteRelay);
    // Beside the box events, the operator events the relay announced (a pause, each dead letter) are stored deliveries too.
    const events = sqliteRows(file, "SELECT id FROM deliveries WHERE type LIKE 'box.%' ORDER BY id").map((r) => r.id as string);
    expect(events).toHaveLength(3);
    expect(sqliteRows(file, "SELECT type FROM deliveries WHERE type NOT LIKE 'box.%' ORDER BY type").map((r) => r.type)).toEqual([
      'boxrelay.event.dead_lettered',
      'boxrelay.event.dead_lettered',
      'boxrelay.event.dead_lettered',
      'boxrelay.sink.paused',
    ]);
    expect(sqliteRows(file, 'SELECT count(*) AS n FROM boxes WHERE repaired_up_to IS NOT NULL')[0]!.n).toBe(1);
    // A relay killed mid-attempt leaves its leases on a row and a log partition: the copy must not carry them over.
    new BetterSqlite3(file)
      .exec(
        `UPDATE outbox SET lease_owner = 'dead-replica', lease_until = ${Date.now() + 3_600_000} WHERE id = (SELECT min(id) FROM outbox WHERE sink = 'alerts');
         UPDATE log_cursors SET lease_owner = 'dead-replica', lease_until = ${Date.now() + 3_600_000} WHERE sink = 'held'`,
      )
      .close();

    const target = await postgresSchema();
    const copy = await runCli(['store', 'copy', '--to', target], { BOXRELAY_DATABASE: file });
    expect(copy.stderr).toBe('');
    expect(copy.code).toBe(0);
    expect(parseCounts(copy.stdout)).toEqual({
      'deliveries (dedup history)': [7, 7],
      'fan-out rows': [6, 6],
      'pending fan-out work': [3, 3],
      'dead letters': [3, 3],
      'delivered or discarded (kept for their status)': [0, 0],
      'box states': [3, 3],
      'boxes repaired by reconciliation': [1, 1],
      // alerts and audit failing, held paused.
      'sink states': [3, 3],
      'paused sinks': [1, 1],
      'relay facts (watch start, log deletions)': [2, 2],
      'reconciliation runs': [1, 1],
      'upstream secrets': [1, 1],
      // The operator's pause and the reconcile run.
      'audit entries': [2, 2],
      // alerts' failed attempts and audit's refusals, by minute (both in one minute, or across two).
      'delivery counts per minute': expect.anything(),
      // Every attempt, recorded by the fan-out's worker thread: alerts' 3 of each event, audit's refusals.
      'delivery attempts': [12, 12],
      // Their sums per sink and minute, and per status (in one minute, or across two).
      'attempts per sink and minute (health)': expect.anything(),
      'attempts per sink, minute and status (health)': expect.anything(),
      // alerts, audit and held: 16 partitions each.
      'log cursors (per sink and partition)': [48, 48],
      // No S3 archive here: its ledger is copied empty.
      'S3 archive objects': [0, 0],
      'events in S3 archive objects': [0, 0],
    });
    const [minutesInSource, minutesInTarget] = parseCounts(copy.stdout)['delivery counts per minute']!;
    expect(minutesInSource).toBeGreaterThan(0);
    expect(minutesInTarget).toBe(minutesInSource);
    for (const label of ['attempts per sink and minute (health)', 'attempts per sink, minute and status (health)']) {
      const [inSource, inTarget] = parseCounts(copy.stdout)[label]!;
      expect(inSource).toBeGreaterThan(0);
      expect(inTarget).toBe(inSource);
    }
    const [source, copied] = await Promise.all([tablesOf(file), tablesOf(target)]);
    const leaseCleared = (rows: Record<string, unknown>[] | undefined) => rows!.map((row) => ({ ...row, lease_owner: null, lease_until: null }));
    expect(copied).toEqual({ ...source, outbox: leaseCleared(source.outbox), log_cursors: leaseCleared(source.log_cursors) });

    const targetDb = openDatabase({ url: target });
    try {
      const { rows } = await sql<{ next: number }>`SELECT nextval(pg_get_serial_sequence('secrets', 'id')) AS next`.execute(targetDb.kysely);
      expect(rows[0]!.next).toBe((source.secrets!.at(-1)!.id as number) + 1);
    } finally {
      await targetDb.close();
    }

    // Relays on PostgreSQL continue where the SQLite relay stopped.
    alertsUp = true;
    const pgRelay = await serve({ ...env, BOXRELAY_DATABASE: target });
    const again = await post(pgRelay, { id: first.id, secret, boxId: 'bx_one' });
    expect(again).toMatchObject({ status: 200, body: { ok: true, id: first.id, duplicate: true } });
    const api = admin(pgRelay);
    expect(await api.sinks()).toMatchObject({
      alerts: { paused: false, pending: 3, deadLetters: 0 },
      audit: { paused: false, pending: 0, deadLetters: 3 },
      held: { paused: true, pending: 3, deadLetters: 0 },
    });
    const dead = (await api.get('/dead-letters')).deadLetters as { id: number; eventId: string; sink: string; attempts: number }[];
    expect(dead.map((d) => [d.id, d.eventId, d.sink, d.attempts])).toEqual(
      source.outbox!.filter((r) => r.status === 'dead').map((r) => [r.id, r.delivery_id, 'audit', r.attempts]),
    );

    const failedAttempts = alerts.requests.length;
    expect(failedAttempts).toBe(9);
    expect(held.requests).toEqual([]);
    await api.post('/sinks/held/resume');
    await api.post('/sinks/alerts/pause');
    await api.post('/sinks/alerts/resume');
    // A new event: the copied ids did not stop the target's sequences from numbering new work.
    const fresh = await post(pgRelay, { secret, boxId: 'bx_three' });
    expect(fresh).toMatchObject({ status: 200, body: { duplicate: false } });
    await until('the pending work to be delivered', () => api.sinks(), (s) => s.alerts!.pending === 0 && s.held!.pending === 0);
    await stop(pgRelay);

    const all = [...events, fresh.id].sort();
    expect(idsOf(held.requests)).toEqual(all);
    expect(idsOf(alerts.requests.slice(failedAttempts))).toEqual(all);
    expect(audit.requests).toHaveLength(4);
  });

  it('--resume continues an interrupted copy without duplicating rows; without it the target is refused (exit 2), untouched', { timeout: 90_000 }, async () => {
    const file = sqliteFile();
    const relay = await serve({ BOXRELAY_SECRETS: SECRET, BOXRELAY_DATABASE: file });
    for (const box of ['bx_1', 'bx_2', 'bx_3', 'bx_4', 'bx_5']) expect((await post(relay, { secret: SECRET, boxId: box })).status).toBe(200);
    await stop(relay);

    const target = await postgresSchema();
    expect((await runCli(['migrate'], { BOXRELAY_DATABASE: target })).code).toBe(0);
    const database = openDatabase({ url: target });
    const count = async (table: string) => Number((await sql<{ n: string }>`SELECT count(*) AS n FROM ${sql.table(table)}`.execute(database.kysely)).rows[0]!.n);
    try {
      // The target fails part-way (after the deliveries, at the boxes), as a lost connection would.
      await sql`CREATE FUNCTION refuse_boxes() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'the target went away'; END $$`.execute(database.kysely);
      await sql`CREATE TRIGGER refuse_boxes BEFORE INSERT ON boxes FOR EACH ROW EXECUTE FUNCTION refuse_boxes()`.execute(database.kysely);
      const interrupted = await runCli(['store', 'copy', '--to', target], { BOXRELAY_DATABASE: file });
      expect(interrupted.code).toBe(1);
      expect(interrupted.stderr).toMatch(/^boxrelay: the copy stopped part-way: .*the target went away.*; run it again with --resume to continue\n$/);
      expect([await count('deliveries'), await count('boxes')]).toEqual([5, 0]);
      await sql`DROP TRIGGER refuse_boxes ON boxes`.execute(database.kysely);

      const refused = await runCli(['store', 'copy', '--to', target], { BOXRELAY_DATABASE: file });
      expect(refused).toEqual({
        code: 2,
        stdout: '',
        stderr:
          `boxrelay: the target (${databaseLocation(target)}) already holds 5 deliveries (dedup history): store copy fills an empty database ` +
          '(give --resume to continue an interrupted copy into it)\n',
      });
      expect([await count('deliveries'), await count('boxes')]).toEqual([5, 0]);

      const resumed = await runCli(['store', 'copy', '--to', target, '--resume'], { BOXRELAY_DATABASE: file });
      expect(resumed.stderr).toBe('');
      expect(resumed.code).toBe(0);
      expect(parseCounts(resumed.stdout)).toMatchObject({ 'deliveries (dedup history)': [5, 5], 'box states': [5, 5] });
      expect(await tablesOf(target)).toEqual(await tablesOf(file));
    } finally {
      await database.close();
    }
  });

  it.each([
    ['the source is PostgreSQL', async () => ({ BOXRELAY_DATABASE: await postgresSchema() }), 'postgres://127.0.0.1/x',
      'store copy copies from a SQLite database, and BOXRELAY_DATABASE names PostgreSQL: set it to the SQLite file'],
    ['the target is not PostgreSQL', async () => ({ BOXRELAY_DATABASE: sqliteFile() }), '/tmp/other.db', '--to must be a postgres:// or postgresql:// URL'],
  ])('refuses when %s (exit 2), writing nothing', async (_case, envOf, to, message) => {
    const env = await envOf();
    const result = await runCli(['store', 'copy', '--to', to], env);
    expect(result).toEqual({ code: 2, stdout: '', stderr: `boxrelay: ${message}\n` });
    expect(existsSync(to)).toBe(false);
  });

  it('refuses a SQLite file that does not exist (exit 2), creating nothing', async () => {
    const file = sqliteFile();
    const result = await runCli(['store', 'copy', '--to', await postgresSchema()], { BOXRELAY_DATABASE: file });
    expect(result).toEqual({ code: 2, stdout: '', stderr: `boxrelay: there is no SQLite database at ${file} (BOXRELAY_DATABASE)\n` });
    expect(existsSync(file)).toBe(false);
    expect(existsSync(`${file}-lock`)).toBe(false);
  });
});
