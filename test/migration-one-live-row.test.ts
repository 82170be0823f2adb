import { Migrator, sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import { migrations } from '../migrations/index.js';
import { openDatabase } from '../src/store/engines/database.js';
import { openMigrated } from '../src/store/engines/migrate.js';
import { createFanoutStore } from '../src/store/fanout-store.js';
import { engines } from './support/databases.js';

describe.each(engines)('migration 019 on $name', (engine) => {
  it('merges the dead letters an event holds twice for a sink, so each retries as one pending row', async () => {
    const url = await engine.url();
    const before = openDatabase({ url });
    try {
      const schema = engine.name === 'postgres' ? (await sql<{ s: string }>`SELECT current_schema() AS s`.execute(before.kysely)).rows[0]!.s : undefined;
      const migrator = new Migrator({ db: before.kysely, provider: { getMigrations: async () => migrations }, migrationTableSchema: schema });
      const { error } = await migrator.migrateTo('016_log_deletions');
      expect(error).toBeUndefined();
      // In id order, as resends and replays beside dead letters left them.
      await sql`INSERT INTO outbox (delivery_id, sink, status, attempts, next_attempt_at, last_error, created_at, updated_at) VALUES
        ('evt_twice', 'h', 'dead', 1, 0, 'http_400', 1, 1),
        ('evt_twice', 'h', 'dead', 1, 0, 'http_410', 2, 2),
        ('evt_resent', 'h', 'dead', 1, 0, 'http_400', 3, 3),
        ('evt_resent', 'h', 'pending', 0, 4, NULL, 4, 4),
        ('evt_resent', 'other', 'set_aside', 0, 5, 'sink not configured', 5, 5),
        ('evt_resent', 'other', 'dead', 2, 6, 'http_500', 6, 6),
        ('evt_delivered', 'h', 'dead', 1, 0, 'http_400', 7, 7),
        ('evt_delivered', 'h', 'delivered', 1, 8, NULL, 8, 8),
        ('evt_later', 'h', 'delivered', 1, 9, NULL, 9, 9),
        ('evt_later', 'h', 'dead', 1, 10, 'http_400', 10, 10),
        ('evt_once', 'h', 'dead', 3, 11, 'http_500', 11, 11)`.execute(before.kysely);
    } finally {
      await before.close();
    }

    const { database, migrations: applied } = await openMigrated({ url });
    try {
      expect(applied.map((m) => m.migrationName)).toContain('019_one_live_row');
      const rows = await database.kysely.selectFrom('outbox').select(['delivery_id', 'sink', 'status', 'last_error', 'version']).orderBy('id').execute();
      expect(rows).toEqual([
        { delivery_id: 'evt_twice', sink: 'h', status: 'dead', last_error: 'http_410', version: 0 },
        { delivery_id: 'evt_resent', sink: 'h', status: 'pending', last_error: null, version: 0 },
        { delivery_id: 'evt_resent', sink: 'other', status: 'dead', last_error: 'http_500', version: 0 },
        { delivery_id: 'evt_delivered', sink: 'h', status: 'delivered', last_error: null, version: 0 },
        { delivery_id: 'evt_later', sink: 'h', status: 'delivered', last_error: null, version: 0 },
        { delivery_id: 'evt_later', sink: 'h', status: 'dead', last_error: 'http_400', version: 0 },
        { delivery_id: 'evt_once', sink: 'h', status: 'dead', last_error: 'http_500', version: 0 },
      ]);
      // A second live row of an event and sink is refused from now on.
      await expect(
        sql`INSERT INTO outbox (delivery_id, sink, status, attempts, next_attempt_at, created_at, updated_at) VALUES ('evt_once', 'h', 'pending', 0, 0, 0, 0)`.execute(database.kysely),
      ).rejects.toThrow(/unique/i);
      const exceptions = createFanoutStore(database).exceptions;
      expect(await exceptions.retryDeadLetters({ configured: ['h', 'other'], now: 100 })).toBe(4);
      const pending = await database.kysely.selectFrom('outbox').select(['delivery_id', 'sink']).where('status', '=', 'pending').orderBy('id').execute();
      expect(pending).toEqual([
        { delivery_id: 'evt_twice', sink: 'h' },
        { delivery_id: 'evt_resent', sink: 'h' },
        { delivery_id: 'evt_resent', sink: 'other' },
        { delivery_id: 'evt_later', sink: 'h' },
        { delivery_id: 'evt_once', sink: 'h' },
      ]);
    } finally {
      await database.close();
    }
  });
});
