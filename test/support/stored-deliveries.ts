import BetterSqlite3 from 'better-sqlite3';
import { openMigrated } from '../../src/store/engines/migrate.js';
import { eventId } from './sign.js';

/** A migrated SQLite file holding `count` deliveries of some 2 KB each (24 MB for 12,000), so a backup of it takes many steps. */
export async function preloaded(file: string, count: number): Promise<void> {
  await (await openMigrated({ url: file })).database.close();
  const sqlite = new BetterSqlite3(file);
  const insert = sqlite.prepare(
    "INSERT INTO deliveries (id, type, box_id, created_at, received_at, attempt, payload) VALUES (?, 'box.ready', 'bx_old', '2026-01-01T00:00:00.000Z', ?, 1, ?)",
  );
  const padding = 'x'.repeat(2000);
  sqlite.transaction(() => {
    for (let i = 0; i < count; i++) insert.run(eventId(), Date.now(), JSON.stringify({ padding }));
  })();
  sqlite.close();
}
