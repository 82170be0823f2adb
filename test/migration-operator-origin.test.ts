import { afterEach, describe, expect, it } from 'vitest';
import { openDatabase, type Database } from '../src/store/engines/database.js';
import { createMigrator, migrateToLatest } from '../src/store/engines/migrate.js';
import { engines } from './support/databases.js';

describe.each(engines)('migration 010 on $name: operator events stored before it keep their origin', (engine) => {
  let database: Database | undefined;
  afterEach(async () => database?.close());

  it('marks stored boxrelay. events as operator events and leaves the upstream events alone', async () => {
    database = openDatabase({ url: await engine.url() });
    const migrator = await createMigrator(database);
    const before = await migrator.migrateTo('008_deliveries_type_index');
    expect(before.error).toBeUndefined();
    const row = (id: string, type: string, origin: 'history' | null) => ({
      id,
      type,
      box_id: 'bx_a',
      created_at: '2026-11-24T07:00:00.000Z',
      received_at: 1,
      attempt: null,
      payload: '{}',
      origin,
    });
    await database.kysely
      .insertInto('deliveries')
      .values([
        row('evt_operator', 'boxrelay.event.dead_lettered', null),
        row('evt_received', 'box.error', null),
        row('evt_history', 'box.ready', 'history'),
      ])
      .execute();

    await migrateToLatest(database);

    const origins = await database.kysely.selectFrom('deliveries').select(['id', 'origin']).orderBy('id').execute();
    expect(origins).toEqual([
      { id: 'evt_history', origin: 'history' },
      { id: 'evt_operator', origin: 'operator' },
      { id: 'evt_received', origin: null },
    ]);
  });
});
