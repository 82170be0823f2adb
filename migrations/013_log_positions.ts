import { PostgresAdapter, sql, type Kysely } from 'kysely';

/**
 * Log positions of the relay's own (contract section 13, moves and neighbours on PostgreSQL). A
 * delivery's position was `(log_xid, seq)`, `log_xid` the id of the transaction that stored it, and
 * readers waited for every older transaction of the cluster: a restore into another cluster
 * restarts transaction ids below the cursors (new deliveries were never read), and any writing
 * transaction on the server held the fan-out back. Now a position is one number, `seq`, given after
 * commit by one sequencer at a time (src/store/log/sequencer.ts); on SQLite the single writer gives it
 * when it inserts, as before. A delivery stored and not yet sequenced has `seq` null and `sinks` set.
 *
 * PostgreSQL's existing positions are renumbered 1..n in their order; each cursor and mark becomes
 * the number of the last delivery at or before it, so no cursor passes or falls behind a delivery.
 * An open exception is made unique per delivery and sink (a crash between writing one and storing
 * the cursor read the entry again and wrote a second).
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  const postgres = db.getExecutor().adapter instanceof PostgresAdapter;
  await db.schema.dropIndex('deliveries_log').execute();
  await db.schema.dropIndex('log_cursors_position').execute();
  await db.schema.dropIndex('log_marks_position').execute();
  if (postgres) {
    await sql`CREATE TEMP TABLE log_renumber ON COMMIT DROP AS
      SELECT id, log_xid, seq, row_number() OVER (ORDER BY log_xid, seq) AS n FROM deliveries WHERE seq IS NOT NULL`.execute(db);
    await sql`CREATE INDEX ON log_renumber (log_xid, seq)`.execute(db);
    for (const table of ['log_cursors', 'log_marks']) {
      await sql`UPDATE ${sql.table(table)} AS c SET seq = COALESCE((SELECT r.n FROM log_renumber r
        WHERE (r.log_xid, r.seq) <= (c.xid, c.seq) ORDER BY r.log_xid DESC, r.seq DESC LIMIT 1), 0)`.execute(db);
    }
    await sql`UPDATE deliveries d SET seq = r.n FROM log_renumber r WHERE d.id = r.id`.execute(db);
    await sql`ALTER TABLE deliveries ALTER COLUMN seq DROP DEFAULT`.execute(db);
  }
  await db.schema.alterTable('deliveries').dropColumn('log_xid').execute();
  await db.schema.alterTable('log_cursors').dropColumn('xid').execute();
  await db.schema.alterTable('log_marks').dropColumn('xid').execute();
  /** PostgreSQL: the order deliveries were stored in, which the sequencer numbers them by (one box's events keep it). */
  await db.schema.alterTable('deliveries').addColumn('arrival', 'bigint').execute();
  if (postgres) {
    // Set after the column is added, so no stored row is rewritten.
    await sql`ALTER SEQUENCE deliveries_seq RENAME TO deliveries_arrival`.execute(db);
    await sql`ALTER TABLE deliveries ALTER COLUMN arrival SET DEFAULT nextval('deliveries_arrival')`.execute(db);
  }

  await db.schema.createIndex('deliveries_log').unique().on('deliveries').column('seq').where(sql.ref('seq'), 'is not', null).execute();
  // The sequencer's queue: stored deliveries still without a position (only PostgreSQL has any).
  if (postgres) {
    await sql`CREATE INDEX deliveries_unsequenced ON deliveries (arrival) WHERE seq IS NULL AND sinks IS NOT NULL`.execute(db);
  }
  await db.schema.createIndex('log_cursors_position').on('log_cursors').column('seq').execute();
  await db.schema.createIndex('log_marks_position').on('log_marks').columns(['sink', 'part', 'seq']).execute();

  // Keep the oldest of any duplicates the race left, then make it impossible.
  await sql`DELETE FROM outbox WHERE status = 'pending' AND EXISTS (SELECT 1 FROM outbox o
    WHERE o.delivery_id = outbox.delivery_id AND o.sink = outbox.sink AND o.status = 'pending' AND o.id < outbox.id)`.execute(db);
  await db.schema
    .createIndex('outbox_open')
    .unique()
    .on('outbox')
    .columns(['delivery_id', 'sink'])
    .where(sql.ref('status'), '=', 'pending')
    .execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  const postgres = db.getExecutor().adapter instanceof PostgresAdapter;
  await db.schema.dropIndex('outbox_open').execute();
  await db.schema.dropIndex('log_marks_position').execute();
  await db.schema.dropIndex('log_cursors_position').execute();
  if (postgres) await sql`DROP INDEX deliveries_unsequenced`.execute(db);
  await db.schema.dropIndex('deliveries_log').execute();
  await db.schema.alterTable('deliveries').dropColumn('arrival').execute();
  if (postgres) await sql`ALTER SEQUENCE deliveries_arrival RENAME TO deliveries_seq`.execute(db);
  await db.schema.alterTable('deliveries').addColumn('log_xid', 'bigint', (c) => c.notNull().defaultTo(0)).execute();
  await db.schema.alterTable('log_cursors').addColumn('xid', 'bigint', (c) => c.notNull().defaultTo(0)).execute();
  await db.schema.alterTable('log_marks').addColumn('xid', 'bigint', (c) => c.notNull().defaultTo(0)).execute();
  if (postgres) {
    // Positions stay numbers of the relay's: xid 0 for all, new deliveries numbered after them.
    await sql`SELECT setval('deliveries_seq', GREATEST(1, (SELECT COALESCE(MAX(seq), 0) FROM deliveries)))`.execute(db);
    await sql`UPDATE deliveries SET seq = nextval('deliveries_seq') WHERE seq IS NULL AND sinks IS NOT NULL`.execute(db);
    await sql`ALTER TABLE deliveries ALTER COLUMN seq SET DEFAULT nextval('deliveries_seq')`.execute(db);
    await sql`ALTER TABLE deliveries ALTER COLUMN log_xid SET DEFAULT (pg_current_xact_id()::text)::bigint`.execute(db);
  }
  await db.schema.createIndex('deliveries_log').unique().on('deliveries').columns(['log_xid', 'seq']).where(sql.ref('seq'), 'is not', null).execute();
  await db.schema.createIndex('log_cursors_position').on('log_cursors').columns(['xid', 'seq']).execute();
  await db.schema.createIndex('log_marks_position').on('log_marks').columns(['sink', 'part', 'xid', 'seq']).execute();
}
