import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import BetterSqlite3 from 'better-sqlite3';
import { sql } from 'kysely';
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

describe('openMigrated on a PostgreSQL server shared with other applications', () => {
  it('starts while another application creates and drops schemas of its own, and looks at no schema but its own', async () => {
    const url = await postgresSchema();
    const other = new pg.Client(POSTGRES_URL);
    await other.connect();
    const prefix = `other_app_${randomBytes(4).toString('hex')}`;
    let churning = true;
    // Schemas come and go, each committed on its own, as the relay starts: Kysely's own introspection,
    // listing every schema and then looking each up again by name, failed on one dropped between the
    // two ("schema ... does not exist"). That race is met only by chance; what always fails on that
    // introspection is the other application's schema in its answer (below).
    const churn = (async () => {
      for (let n = 0; churning; n++) {
        const schema = `${prefix}_${n}`;
        await other.query(`CREATE SCHEMA ${schema}`);
        await other.query(`CREATE TABLE ${schema}.t (x int)`);
        await other.query(`DROP SCHEMA ${schema} CASCADE`);
      }
    })();
    const kept = `${prefix}_kept`;
    await other.query(`CREATE SCHEMA ${kept}; CREATE TABLE ${kept}.kysely_migration (name text)`);
    try {
      for (let start = 0; start < 10; start++) {
        const { database } = await openMigrated({ url });
        const tables = await database.kysely.introspection.getTables({ withInternalKyselyTables: true });
        const { rows } = await sql<{ schema: string }>`SELECT current_schema() AS schema`.execute(database.kysely);
        await database.close();
        expect(tables.map((table) => table.name)).toContain('kysely_migration');
        // Another application's table of the same name is not the relay's record of its migrations.
        expect(new Set(tables.map((table) => table.schema))).toEqual(new Set([rows[0]!.schema]));
      }
    } finally {
      churning = false;
      await churn;
      await other.query(`DROP SCHEMA ${kept} CASCADE`);
      await other.end();
    }
  });
});
