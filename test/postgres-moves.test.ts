import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fetchAdmin } from './support/admin.js';
import { waitFor } from './support/fanout.js';
import { ADMIN_TOKEN, fanoutFixture } from './support/fanout-relay.js';
import { ownPostgres, postgresTool, type OwnPostgres } from './support/postgres-server.js';
import { requireBuild, type RelayProcess } from './support/process.js';
import { SECRET, delivery } from './support/sign.js';

/**
 * Contract section 13, moves and neighbours on PostgreSQL: the log's positions belong to the relay,
 * so a database restored into another cluster fans out as before, and transactions of other
 * databases or other clients on the same server never hold the fan-out back.
 */

beforeAll(requireBuild);
const { defer, server, serve } = fanoutFixture();

const servers: OwnPostgres[] = [];
afterAll(async () => {
  for (const own of servers) await own.close();
});
async function cluster(): Promise<OwnPostgres> {
  // Prepared transactions are off by default: a test leaves one open.
  const own = await ownPostgres({ max_prepared_transactions: '4' });
  servers.push(own);
  return own;
}

/** Hooks `ok` (answers 200) and `down` (answers 503 for ever) on a relay of `database`. */
async function relayOn(database: string, hooks: { ok: string; down?: string }): Promise<RelayProcess> {
  const dir = mkdtempSync(join(tmpdir(), 'boxrelay-moves-'));
  const lines = [`- name: ok\n  url: ${hooks.ok}\n  timeoutMs: 2000\n`];
  if (hooks.down) lines.push(`- name: down\n  url: ${hooks.down}\n  timeoutMs: 2000\n  maxAttempts: 20\n`);
  writeFileSync(join(dir, 'hooks.yaml'), lines.join(''));
  return serve({
    BOXRELAY_SECRETS: SECRET,
    BOXRELAY_DATABASE: database,
    BOXRELAY_HOOKS_FILE: join(dir, 'hooks.yaml'),
    BOXRELAY_ADMIN_TOKEN: ADMIN_TOKEN,
    BOXRELAY_OUTBOX_POLL_MS: '200',
  });
}

async function post(relay: RelayProcess, count: number, boxPrefix: string): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < count; i++) {
    const d = delivery({ timestamp: Math.floor(Date.now() / 1000), boxId: `${boxPrefix}_${i % 5}` });
    const res = await fetch(`http://127.0.0.1:${relay.port}/webhooks`, { method: 'POST', headers: d.headers, body: d.body });
    expect(res.status).toBe(200);
    ids.push(d.id);
  }
  return ids;
}

async function statuses(relay: RelayProcess, id: string): Promise<Record<string, string>> {
  const res = await fetchAdmin(relay.internalPort, 'GET', `/events/${id}`, ADMIN_TOKEN);
  expect(res.status).toBe(200);
  const body = res.body as { deliveries: { sink: string; status: string }[] };
  return Object.fromEntries(body.deliveries.map((d) => [d.sink, d.status]));
}

const idsOf = (requests: { body: string }[]) => new Set(requests.map((r) => (JSON.parse(r.body) as { id: string }).id));

/** Runs `count` transactions that each take a transaction id, so the cluster's counter is far ahead of a new one's. */
async function burnTransactionIds(url: string, count: number): Promise<void> {
  const client = new pg.Client(url);
  await client.connect();
  try {
    for (let i = 0; i < count; i++) await client.query('SELECT pg_current_xact_id()');
  } finally {
    await client.end();
  }
}

describe('a database moved to another cluster', () => {
  it('fans out every delivery accepted after a pg_dump and pg_restore into a fresh cluster, and none reads delivered early', async () => {
    const ok = await server(() => 200);
    const down = await server(() => 503);
    const source = await cluster();
    const sourceUrl = await source.database('relay');
    await burnTransactionIds(sourceUrl, 3000);

    const before = await relayOn(sourceUrl, { ok: ok.url, down: down.url });
    const first = await post(before, 10, 'bx_before');
    await ok.received(10);
    before.child.kill('SIGTERM');
    await before.exited;

    const dump = join(source.dir, 'relay.dump');
    await postgresTool('pg_dump', ['-h', '127.0.0.1', '-p', new URL(source.url).port, '-U', 'postgres', '-Fc', '-f', dump, 'relay']);
    const target = await cluster();
    const targetUrl = await target.database('relay');
    await postgresTool('pg_restore', ['-h', '127.0.0.1', '-p', new URL(target.url).port, '-U', 'postgres', '--no-owner', '-d', 'relay', dump]);
    // The fresh cluster's transaction ids are far below the source's: positions must not depend on them.
    const [fresh] = await target.query<{ xid: string }>('SELECT pg_current_xact_id()::text AS xid');
    expect(Number(fresh?.xid)).toBeLessThan(3000);

    const after = await relayOn(targetUrl, { ok: ok.url, down: down.url });
    const moved = await post(after, 20, 'bx_after');
    const requests = await ok.received(30);
    const delivered = idsOf(requests);
    for (const id of [...first, ...moved]) expect(delivered.has(id)).toBe(true);
    // Once `ok` has settled them, `down` (which acknowledged none) must not read delivered.
    for (const id of moved) {
      await waitFor(async () => (await statuses(after, id)).ok === 'delivered', `${id} delivered to ok`);
      expect((await statuses(after, id)).down).toBe('pending');
    }
    defer(async () => {
      after.child.kill('SIGTERM');
      await after.exited;
    });
  });
});

describe('neighbours on a shared server', () => {
  let server_: OwnPostgres;
  beforeAll(async () => {
    server_ = await cluster();
  });

  /** A client of its own that holds a transaction open (until the test ends). */
  async function holdOpen(url: string, statements: string[]): Promise<void> {
    const client = new pg.Client(url);
    await client.connect();
    for (const statement of statements) await client.query(statement);
    defer(async () => {
      await client.query('ROLLBACK').catch(() => {});
      await client.end();
    });
  }

  /** A relay on `database`, with a neighbour's transaction held open by `hold` first: every new delivery reaches the hook. */
  async function fansOutBeside(database: string, hold: (url: string) => Promise<void>): Promise<void> {
    const url = await server_.database(database);
    await hold(url);
    const ok = await server(() => 200);
    const relay = await relayOn(url, { ok: ok.url });
    const ids = await post(relay, 10, `bx_${database}`);
    expect(idsOf(await ok.received(10))).toEqual(new Set(ids));
  }

  it('never holds the fan-out behind a writing transaction left open in another database of the server', async () => {
    const other = await server_.database('other_app');
    await fansOutBeside('relay_a', () => holdOpen(other, ['CREATE TABLE IF NOT EXISTS jobs (id int)', 'BEGIN', 'INSERT INTO jobs VALUES (1)']));
  });

  it('never holds the fan-out behind another client\'s open transaction in the relay\'s own database', async () => {
    await fansOutBeside('relay_b', (url) => holdOpen(url, ['CREATE TABLE IF NOT EXISTS reports (id int)', 'BEGIN', 'INSERT INTO reports VALUES (1)']));
  });

  it('never holds the fan-out behind a forgotten prepared transaction', async () => {
    await fansOutBeside('relay_c', async (url) => {
      const client = new pg.Client(url);
      await client.connect();
      for (const statement of ['CREATE TABLE IF NOT EXISTS batches (id int)', 'BEGIN', 'INSERT INTO batches VALUES (1)', `PREPARE TRANSACTION 'forgotten'`]) {
        await client.query(statement);
      }
      defer(async () => {
        await client.query(`ROLLBACK PREPARED 'forgotten'`);
        await client.end();
      });
    });
  });
});
