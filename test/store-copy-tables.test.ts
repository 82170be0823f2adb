import BetterSqlite3 from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { COPIED, NOT_COPIED } from '../src/store/copy/tables.js';
import { openMigrated } from '../src/store/engines/migrate.js';
import { sqliteFile } from './support/databases.js';

/**
 * `store copy` is driven by one list: a migration that adds a table must name it there (copied, or
 * not and why), or this test fails, so no new kind of state is left behind by a move to PostgreSQL.
 */
describe('store copy: the list of tables', () => {
  it('names every table of the migrated schema, each copied table by its primary key', async () => {
    const file = sqliteFile();
    await (await openMigrated({ url: file })).database.close();
    const sqlite = new BetterSqlite3(file, { readonly: true });
    try {
      const tables = (sqlite.prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name").all() as { name: string }[]).map(
        (row) => row.name,
      );
      const named = [...COPIED.map((t) => t.table), ...Object.keys(NOT_COPIED)];
      expect(tables.filter((table) => !named.includes(table))).toEqual([]);
      expect(named.filter((table) => !tables.includes(table))).toEqual([]);
      for (const { table, key, cleared = [] } of COPIED) {
        const columns = sqlite.pragma(`table_info(${table})`) as { name: string; pk: number }[];
        const primaryKey = columns.filter((c) => c.pk > 0).sort((a, b) => a.pk - b.pk).map((c) => c.name);
        expect({ table, key }).toEqual({ table, key: primaryKey });
        for (const column of cleared) expect(columns.map((c) => c.name)).toContain(column);
      }
    } finally {
      sqlite.close();
    }
  });
});
