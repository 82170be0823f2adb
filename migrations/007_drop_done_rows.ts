import { sql, type Kysely } from 'kysely';
import * as pruneIndex from './002_prune_index.js';

/**
 * Delivered fan-out rows are deleted when delivered; the `done` status of early development builds
 * is gone. Any such rows left are removed once here, with the index that served their pruning.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`DELETE FROM outbox WHERE status = 'done'`.execute(db);
  await pruneIndex.down(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await pruneIndex.up(db);
}
