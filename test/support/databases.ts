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
  return `${POSTGRES_URL}?options=${encodeURIComponent(`-c search_path=${schema}`)}`;
}

/** The engines every storage-backed suite runs on. */
export const engines = [
  { name: 'sqlite', url: async () => sqliteFile() },
  { name: 'postgres', url: postgresSchema },
] as const;
