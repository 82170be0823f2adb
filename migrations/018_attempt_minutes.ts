import type { Kysely } from 'kysely';
import { LATENCY_COLUMNS } from '../src/store/attempts/latency-buckets.js';

/**
 * Contract sections 16 and 19: a sink's health and its chart of attempts per minute, read from
 * per-minute sums kept as the attempts are written (whatever `BOXRELAY_ATTEMPTS` keeps of them), so
 * a window reads one row per minute (and per status), never the attempts themselves.
 * `attempt_minutes`: per sink and UTC minute, the attempts by outcome, a latency histogram of those
 * answered (LATENCY_COLUMNS), the slowest answer, and the last success and failure. `attempt_statuses`:
 * per sink, minute and status key (the HTTP status, else the failure's class or code), the attempts.
 * Both lead with the sink: a window is one range of each. Not filled from the attempts stored before:
 * their successes are missing with `BOXRELAY_ATTEMPTS=failed` or `off`, and a pass over them would
 * hold the upgrade for as long as they are many; the windows fill in from the upgrade on.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  let minutes = db.schema
    .createTable('attempt_minutes')
    .addColumn('sink', 'text', (c) => c.notNull())
    /** Epoch ms of the minute's start (UTC). */
    .addColumn('minute', 'bigint', (c) => c.notNull())
    .addColumn('delivered', 'bigint', (c) => c.notNull())
    .addColumn('retried', 'bigint', (c) => c.notNull())
    .addColumn('dead_lettered', 'bigint', (c) => c.notNull())
    /** Epoch ms: the start of the minute's latest success, and of its latest failure. */
    .addColumn('last_success_at', 'bigint')
    .addColumn('last_failure_at', 'bigint')
    .addColumn('slowest_ms', 'integer', (c) => c.notNull());
  for (const column of LATENCY_COLUMNS) minutes = minutes.addColumn(column, 'integer', (c) => c.notNull());
  await minutes.addPrimaryKeyConstraint('attempt_minutes_pk', ['sink', 'minute']).execute();

  await db.schema
    .createTable('attempt_statuses')
    .addColumn('sink', 'text', (c) => c.notNull())
    .addColumn('minute', 'bigint', (c) => c.notNull())
    .addColumn('status', 'text', (c) => c.notNull())
    .addColumn('attempts', 'bigint', (c) => c.notNull())
    .addPrimaryKeyConstraint('attempt_statuses_pk', ['sink', 'minute', 'status'])
    .execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.dropTable('attempt_statuses').execute();
  await db.schema.dropTable('attempt_minutes').execute();
}
