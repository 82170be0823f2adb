import { Migrator, sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import { migrations } from '../migrations/index.js';
import { openDatabase } from '../src/store/engines/database.js';
import { openMigrated } from '../src/store/engines/migrate.js';
import { engines } from './support/databases.js';

describe.each(engines)('migration 009 on $name', (engine) => {
  it('keeps pending work and dead letters; work set aside before it reads set_aside', async () => {
    const url = await engine.url();
    const before = openDatabase({ url });
    try {
      const schema = engine.name === 'postgres' ? (await sql<{ s: string }>`SELECT current_schema() AS s`.execute(before.kysely)).rows[0]!.s : undefined;
      const migrator = new Migrator({ db: before.kysely, provider: { getMigrations: async () => migrations }, migrationTableSchema: schema });
      const { error } = await migrator.migrateTo('008_deliveries_type_index');
      expect(error).toBeUndefined();
      await sql`INSERT INTO outbox (delivery_id, sink, status, attempts, next_attempt_at, last_error, created_at, updated_at) VALUES
        ('evt_a', 'h', 'pending', 2, 5, 'http_503', 1, 2),
        ('evt_b', 'h', 'dead', 8, 5, 'http_500', 1, 3),
        ('evt_c', 'gone', 'dead', 0, 5, 'sink not configured', 1, 4)`.execute(before.kysely);
    } finally {
      await before.close();
    }

    const { database, migrations: applied } = await openMigrated({ url });
    try {
      expect(applied.map((m) => m.migrationName)[0]).toBe('009_kept_outcomes');
      const rows = await database.kysely.selectFrom('outbox').select(['delivery_id', 'status', 'attempts', 'last_error']).orderBy('delivery_id').execute();
      expect(rows).toEqual([
        { delivery_id: 'evt_a', status: 'pending', attempts: 2, last_error: 'http_503' },
        { delivery_id: 'evt_b', status: 'dead', attempts: 8, last_error: 'http_500' },
        { delivery_id: 'evt_c', status: 'set_aside', attempts: 0, last_error: 'sink not configured' },
      ]);
    } finally {
      await database.close();
    }
  });
});
