import { statSync, statfsSync } from 'node:fs';
import pg from 'pg';
import { Registry } from 'prom-client';
import request from 'supertest';
import { afterEach, describe, expect, it } from 'vitest';
import { createMetrics } from '../src/metrics/metrics.js';
import { postgresSchema, sqliteFile } from './support/databases.js';
import { parseExposition, valueOf, type Exposition } from './support/prometheus.js';
import { testRelay, type TestRelay } from './support/relay.js';

const MiB = 1024 * 1024;

let t: TestRelay | undefined;
afterEach(async () => {
  await t?.close();
  t = undefined;
});

async function scrape(relay: TestRelay): Promise<Exposition> {
  return parseExposition((await request(relay.relay.internalApp).get('/metrics').expect(200)).text);
}

describe('storage metrics on SQLite', () => {
  it('database_bytes is the file with its WAL; storage_free_bytes and storage_size_bytes are the filesystem holding it', async () => {
    const database = sqliteFile();
    t = await testRelay({ database });
    for (let i = 0; i < 20; i++) expect((await t.post({ boxId: `bx_${i}` })).status).toBe(200);
    // The relay's own bookkeeping may write meanwhile; the file and its WAL only grow (its checkpoints reuse the WAL, never cut it).
    const onDisk = () => statSync(database).size + statSync(`${database}-wal`).size;
    const before = onDisk();
    const e = await scrape(t);
    const after = onDisk();
    expect(statSync(`${database}-wal`).size).toBeGreaterThan(0);
    expect(valueOf(e, 'boxrelay_database_bytes')).toBeGreaterThanOrEqual(before);
    expect(valueOf(e, 'boxrelay_database_bytes')).toBeLessThanOrEqual(after);
    expect(e.types.get('boxrelay_storage_free_bytes')).toBe('gauge');
    const { bsize, bavail, blocks } = statfsSync(database);
    expect(valueOf(e, 'boxrelay_storage_size_bytes')).toBe(blocks * bsize);
    // Other processes write to the same filesystem meanwhile.
    expect(Math.abs(valueOf(e, 'boxrelay_storage_free_bytes')! - bavail * bsize)).toBeLessThan(256 * MiB);
  });
});

describe('storage metrics on PostgreSQL', () => {
  it("database_bytes is pg_database_size of the relay's database; the filesystem is not the relay's to watch", async () => {
    const url = await postgresSchema();
    t = await testRelay({ database: url });
    const e = await scrape(t);
    const client = new pg.Client(url);
    await client.connect();
    const { rows } = await client.query<{ bytes: string }>('SELECT pg_database_size(current_database()) AS bytes').finally(() => client.end());
    // Other test files write to the same database meanwhile.
    expect(Math.abs(valueOf(e, 'boxrelay_database_bytes')! - Number(rows[0]!.bytes))).toBeLessThan(64 * MiB);
    expect(valueOf(e, 'boxrelay_database_bytes')).toBeGreaterThan(MiB);
    expect(e.types.has('boxrelay_storage_free_bytes')).toBe(false);
    expect(e.types.has('boxrelay_storage_size_bytes')).toBe(false);
  });
});

describe('storage metrics that cannot be read', () => {
  it('keep their last value rather than fail the scrape', async () => {
    const registry = new Registry();
    const reads = [async () => 4096, async () => Promise.reject(new Error('EIO'))];
    createMetrics(registry, { sinks: [], sources: { databaseBytes: () => reads.shift()!() } });
    for (let i = 0; i < 2; i++) {
      const e = parseExposition(await registry.metrics());
      expect(valueOf(e, 'boxrelay_database_bytes')).toBe(4096);
    }
  });
});
