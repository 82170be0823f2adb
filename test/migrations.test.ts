import { sql } from 'kysely';
import { afterEach, describe, expect, it } from 'vitest';
import { openDatabase, type Database } from '../src/store/database.js';
import { migrateToLatest, migratorFor } from '../src/store/migrate.js';
import { engines } from './support/databases.js';

describe.each(engines)('migration 004_delete_delivered on $name', (engine) => {
  let database: Database | undefined;
  afterEach(async () => database?.close());

  it('removes the rows an older relay kept as done, keeps pending work and dead letters, drops the done index', async () => {
    database = openDatabase({ url: await engine.url() });
    const db = database.kysely;
    // The schema as the previous release left it.
    const { error } = await (await migratorFor(database)).migrateTo('003_outbox_lanes');
    expect(error).toBeUndefined();
    const row = (delivery_id: string, status: string) => ({
      delivery_id,
      sink: 'nats',
      status,
      attempts: 1,
      next_attempt_at: 1,
      created_at: 1,
      updated_at: 1,
    });
    await db
      .insertInto('outbox')
      .values([row('evt_done', 'done'), row('evt_pending', 'pending'), row('evt_dead', 'dead')] as never)
      .execute();

    await migrateToLatest(database);

    const left = await db.selectFrom('outbox').select(['delivery_id', 'status']).orderBy('id').execute();
    expect(left).toEqual([
      { delivery_id: 'evt_pending', status: 'pending' },
      { delivery_id: 'evt_dead', status: 'dead' },
    ]);
    const indexes =
      database.dialect === 'sqlite'
        ? sql<{ name: string }>`SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'outbox'`
        : sql<{ name: string }>`SELECT indexname AS name FROM pg_indexes WHERE tablename = 'outbox' AND schemaname = current_schema()`;
    const names = (await indexes.execute(db)).rows.map((r) => r.name);
    expect(names).toContain('outbox_due');
    expect(names).not.toContain('outbox_done_created_at');
  });
});
