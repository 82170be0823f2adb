import { PostgresAdapter, sql, type Kysely } from 'kysely';

/**
 * The stored deliveries are the fan-out's log. Each delivery gets a log position and the
 * sinks it was routed to when accepted; each sink reads the log by a cursor per partition (a hash of
 * the box id), and only the exceptions (retries, dead letters, held or replayed work, deliveries
 * after failures) get outbox rows. The outbox and its pending, retrying, dead and paused rows stay as
 * they are: they are the exceptions table, so no work is lost by the move. Deliveries stored before
 * have no position and are never read from the log: their fan-out rows say where they stand.
 *
 * Position: `(log_xid, seq)`. On SQLite one writer at a time takes `seq = MAX + 1` inside its
 * transaction, so `log_xid` is always 0 and positions follow commits. On PostgreSQL `seq` comes from
 * a sequence and `log_xid` is the inserting transaction's id: a reader takes only rows of
 * transactions older than every one still running (`pg_snapshot_xmin`), so a transaction that
 * commits late can never hold a position a cursor already passed.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  const postgres = db.getExecutor().adapter instanceof PostgresAdapter;
  // Added without a volatile default (which would rewrite every stored row), then given one for new rows.
  await db.schema.alterTable('deliveries').addColumn('seq', 'bigint').execute();
  await db.schema.alterTable('deliveries').addColumn('log_xid', 'bigint', (c) => c.notNull().defaultTo(0)).execute();
  await db.schema.alterTable('deliveries').addColumn('part', 'integer', (c) => c.notNull().defaultTo(0)).execute();
  /** Comma-joined sink names (`[a-z0-9-]+`, so no comma inside one). */
  await db.schema.alterTable('deliveries').addColumn('sinks', 'text').execute();
  await db.schema.alterTable('deliveries').addColumn('trace_parent', 'text').execute();
  if (postgres) {
    await sql`CREATE SEQUENCE deliveries_seq`.execute(db);
    await sql`ALTER TABLE deliveries ALTER COLUMN seq SET DEFAULT nextval('deliveries_seq')`.execute(db);
    await sql`ALTER TABLE deliveries ALTER COLUMN log_xid SET DEFAULT (pg_current_xact_id()::text)::bigint`.execute(db);
  }
  await db.schema
    .createIndex('deliveries_log')
    .unique()
    .on('deliveries')
    .columns(['log_xid', 'seq'])
    .where(sql.ref('seq'), 'is not', null)
    .execute();

  await db.schema
    .createTable('log_cursors')
    .addColumn('sink', 'text', (c) => c.notNull())
    .addColumn('part', 'integer', (c) => c.notNull())
    /** Done up to this position: every routed event at or before it is delivered or has an outbox row. */
    .addColumn('xid', 'bigint', (c) => c.notNull())
    .addColumn('seq', 'bigint', (c) => c.notNull())
    .addColumn('lease_owner', 'text')
    .addColumn('lease_until', 'bigint')
    .addColumn('updated_at', 'bigint', (c) => c.notNull())
    .addPrimaryKeyConstraint('log_cursors_pk', ['sink', 'part'])
    .execute();
  // SQLite numbers a new delivery after the furthest cursor too (retention may have removed the newest deliveries): one seek.
  await db.schema.createIndex('log_cursors_position').on('log_cursors').columns(['xid', 'seq']).execute();

  // When a cursor passed a position: the time an event delivered at its first attempt was acknowledged.
  await db.schema
    .createTable('log_marks')
    .addColumn('sink', 'text', (c) => c.notNull())
    .addColumn('part', 'integer', (c) => c.notNull())
    .addColumn('xid', 'bigint', (c) => c.notNull())
    .addColumn('seq', 'bigint', (c) => c.notNull())
    .addColumn('at', 'bigint', (c) => c.notNull())
    .execute();
  await db.schema.createIndex('log_marks_position').on('log_marks').columns(['sink', 'part', 'xid', 'seq']).execute();
  await db.schema.createIndex('log_marks_at').on('log_marks').column('at').execute();

  // Which processes read each sink's log, so partitions are shared fairly among live replicas.
  await db.schema
    .createTable('log_readers')
    .addColumn('sink', 'text', (c) => c.notNull())
    .addColumn('owner', 'text', (c) => c.notNull())
    .addColumn('seen_at', 'bigint', (c) => c.notNull())
    .addPrimaryKeyConstraint('log_readers_pk', ['sink', 'owner'])
    .execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  const postgres = db.getExecutor().adapter instanceof PostgresAdapter;
  await db.schema.dropTable('log_readers').execute();
  await db.schema.dropTable('log_marks').execute();
  await db.schema.dropTable('log_cursors').execute();
  await db.schema.dropIndex('deliveries_log').execute();
  for (const column of ['trace_parent', 'sinks', 'part', 'log_xid', 'seq']) await db.schema.alterTable('deliveries').dropColumn(column).execute();
  if (postgres) await sql`DROP SEQUENCE deliveries_seq`.execute(db);
}
