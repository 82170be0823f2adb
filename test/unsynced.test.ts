import type { CompiledQuery } from 'kysely';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { openDatabase, type Database } from '../src/store/engines/database.js';
import { migrateToLatest } from '../src/store/engines/migrate.js';
import { executeUnsynced } from '../src/store/engines/unsynced.js';
import { sqliteFile } from './support/databases.js';

describe('executeUnsynced on SQLite', () => {
  let database: Database & { dialect: 'sqlite' };
  beforeEach(async () => {
    database = openDatabase({ url: sqliteFile(), sqliteSynchronous: 'FULL' }) as typeof database;
    await migrateToLatest(database);
  });
  afterEach(() => database.close());

  const raw = <O>(sql: string): { compile(): CompiledQuery<O>; execute(): Promise<O[]> } => ({
    compile: () => ({ sql, parameters: [] }) as unknown as CompiledQuery<O>,
    execute: () => Promise.reject(new Error('SQLite runs the compiled statement itself')),
  });
  const level = () => database.sqlite.pragma('synchronous', { simple: true });

  it('runs the statement at synchronous=NORMAL and puts the configured level back', async () => {
    expect(await executeUnsynced(database, raw('PRAGMA synchronous'))).toEqual([{ synchronous: 1 }]);
    expect(level()).toBe(2);
  });

  it('answers the rows of RETURNING and applies the write', async () => {
    const kysely = database.kysely;
    await kysely.insertInto('heartbeat').values({ id: 1, beat_at: 1 }).execute();
    const rows = await executeUnsynced(database, kysely.updateTable('heartbeat').set({ beat_at: 2 }).returning(['id', 'beat_at']));
    expect(rows).toEqual([{ id: 1, beat_at: 2 }]);
    expect(await kysely.selectFrom('heartbeat').select('beat_at').executeTakeFirst()).toEqual({ beat_at: 2 });
  });

  it('puts the level back when the statement fails', async () => {
    await expect(executeUnsynced(database, raw('UPDATE no_such_table SET x = 1'))).rejects.toThrow(/no such table/);
    expect(level()).toBe(2);
  });
});
