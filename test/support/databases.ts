import { randomBytes } from 'node:crypto';
import { copyFileSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { openDatabase } from '../../src/store/engines/database.js';
import { migrateToLatest } from '../../src/store/engines/migrate.js';

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

let sqliteTemplate: Promise<string> | undefined;

/**
 * A SQLite file already at the newest migration: a copy of one this test process migrated once, so
 * a test that only needs a relay's database pays a file copy, not two dozen migrations (about 0.6 s
 * each on a busy machine). Closed cleanly, the template has no WAL to copy beside it.
 */
export async function migratedSqliteFile(): Promise<string> {
  sqliteTemplate ??= (async () => {
    const file = sqliteFile();
    const database = openDatabase({ url: file });
    try {
      await migrateToLatest(database);
    } finally {
      await database.close();
    }
    return file;
  })();
  const file = sqliteFile();
  copyFileSync(await sqliteTemplate, file);
  return file;
}

/**
 * The engines every storage-backed suite runs on: `url` an empty database, `migratedUrl` one a relay
 * finds at the newest migration. (PostgreSQL's is a fresh schema the relay migrates: a database made
 * from a migrated template, with its drop, costs about as much.)
 */
export const engines = [
  { name: 'sqlite', url: async () => sqliteFile(), migratedUrl: migratedSqliteFile },
  { name: 'postgres', url: postgresSchema, migratedUrl: postgresSchema },
] as const;
