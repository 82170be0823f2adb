import { PostgresAdapter, sql, type Kysely } from 'kysely';

/**
 * Contract section 16: every attempt to deliver an event to a sink, with what a hook sent and got
 * back. Read per event and sink (newest first, `n`), per sink over a time window (health), and
 * pruned by sink and `at` with retention (no index of its own: every success writes this table).
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  const postgres = db.getExecutor().adapter instanceof PostgresAdapter;
  await db.schema
    .createTable('attempts')
    .addColumn('id', postgres ? 'bigserial' : 'integer', (c) => (postgres ? c.primaryKey() : c.primaryKey().autoIncrement()))
    .addColumn('event_id', 'text', (c) => c.notNull())
    .addColumn('sink', 'text', (c) => c.notNull())
    .addColumn('n', 'integer', (c) => c.notNull())
    /** Epoch ms when the attempt started. */
    .addColumn('at', 'bigint', (c) => c.notNull())
    .addColumn('duration_ms', 'integer', (c) => c.notNull())
    .addColumn('outcome', 'text', (c) => c.notNull())
    .addColumn('status', 'integer')
    .addColumn('error_code', 'text')
    .addColumn('error_message', 'text')
    /** 1 when the receiver or broker answered (its latency counts in the sink's health). */
    .addColumn('answered', 'integer', (c) => c.notNull())
    /** JSON: a hook's request and response. */
    .addColumn('request', 'text')
    .addColumn('response', 'text')
    .execute();
  await db.schema.createIndex('attempts_event').on('attempts').columns(['event_id', 'sink', 'n']).execute();
  await db.schema.createIndex('attempts_sink_at').on('attempts').columns(['sink', 'at']).execute();
  // A sink's failures found without walking its successes (a healthy sink has few among many).
  await db.schema.createIndex('attempts_failed').on('attempts').columns(['sink', 'at']).where(sql<boolean>`outcome <> 'delivered'`).execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.dropTable('attempts').execute();
}
