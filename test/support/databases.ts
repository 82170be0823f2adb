import { randomBytes } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';

export const POSTGRES_URL = process.env.BOXRELAY_TEST_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

export function sqliteFile(): string {
  return join(mkdtempSync(join(tmpdir(), 'boxrelay-')), 'relay.db');
}

/**
 * A fresh PostgreSQL schema for one test, selected through the URL's search_path. A missing server
 * fails the test: it is never skipped.
 */
export async function postgresSchema(): Promise<string> {
  const schema = `t_${randomBytes(6).toString('hex')}`;
  const client = new pg.Client(POSTGRES_URL);
  await client.connect();
  try {
    await client.query(`CREATE SCHEMA ${schema}`);
  } finally {
    await client.end();
  }
  created.push(schema);
  return `${POSTGRES_URL}?options=${encodeURIComponent(`-c search_path=${schema}`)}`;
}

/** The schemas this test file made. */
const created: string[] = [];

/**
 * Drops the schemas this test file made (test/support/setup.ts, after each file). Left in place they
 * add up, hundreds a run, on the machine's one server.
 */
export async function dropCreatedSchemas(): Promise<void> {
  if (created.length === 0) return;
  const client = new pg.Client(POSTGRES_URL);
  await client.connect();
  try {
    // A connection a test left open holds locks: wait a while, then leave that schema (and say so).
    await client.query(`SET lock_timeout = '5s'`);
    for (const schema of created.splice(0)) {
      await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`).catch((error: unknown) => console.warn(`test schema ${schema} left in place: ${String(error)}`));
    }
  } finally {
    await client.end();
  }
}

/** The engines every storage-backed suite runs on. */
export const engines = [
  { name: 'sqlite', url: async () => sqliteFile() },
  { name: 'postgres', url: postgresSchema },
] as const;
