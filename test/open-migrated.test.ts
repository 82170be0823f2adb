import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import BetterSqlite3 from 'better-sqlite3';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { migrations } from '../migrations/index.js';
import { MigrationError, openMigrated } from '../src/store/engines/migrate.js';
import { POSTGRES_URL, postgresSchema, sqliteFile } from './support/databases.js';

/** Each engine: a fresh database URL, a way to break migration 001 on it, and whether a connection is left open. */
const engines = [
  {
    name: 'sqlite',
    async fresh() {
      const url = sqliteFile();
      return {
        url,
        break: () => void new BetterSqlite3(url).exec('CREATE TABLE outbox (x TEXT)').close(),
        // Closing the last connection checkpoints and removes the write-ahead log.
        leftOpen: async () => existsSync(`${url}-wal`),
      };
    },
  },
  {
    name: 'postgres',
    async fresh() {
      const application = `boxrelay_test_${randomBytes(4).toString('hex')}`;
      const url = `${await postgresSchema()}&application_name=${application}`;
      const run = async (on: string, sql: string) => {
        const client = new pg.Client(on);
        await client.connect();
        try {
          return await client.query<{ n: number }>(sql);
        } finally {
          await client.end();
        }
      };
      const connections = `SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = '${application}'`;
      return {
        url,
        break: () => run(url, 'CREATE TABLE outbox (x TEXT)'),
        leftOpen: async () => (await run(POSTGRES_URL, connections)).rows[0]!.n > 0,
      };
    },
  },
];

describe.each(engines)('openMigrated on $name', (engine) => {
  it('migrates a new database to the latest schema and reports what it applied, then nothing', async () => {
    const { url } = await engine.fresh();
    const first = await openMigrated({ url });
    expect(first.migrations.map((m) => [m.migrationName, m.status])).toEqual(Object.keys(migrations).map((name) => [name, 'Success']));
    await first.database.close();

    const again = await openMigrated({ url });
    expect(again.migrations).toEqual([]);
    expect(await again.database.kysely.selectFrom('outbox').selectAll().execute()).toEqual([]);
    await again.database.close();
  });

  it('closes the database again when the migration fails', async () => {
    const { url, break: breakIt, leftOpen } = await engine.fresh();
    await breakIt();
    await expect(openMigrated({ url })).rejects.toBeInstanceOf(MigrationError);
    expect(await leftOpen()).toBe(false);
  });
});
