/**
 * The query plans behind the storage layout: every statement the admin API, console, retention,
 * reconciliation and fan-out run on deliveries, boxes and outbox (as src/store builds them), explained
 * on a grown database. `node dist/bench/explain-queries.js <SQLite file | postgres:// URL>`.
 * Only plans are printed; nothing is written.
 */
import BetterSqlite3 from 'better-sqlite3';
import pg from 'pg';
import { isPostgresUrl } from '../src/store/engines/database.js';
import { logHeadSql } from '../src/store/log/position.js';

const ID = "'evt_00000000000000000000000000000000'";
const NOW = String(Date.now());
const DAY = 86_400_000;
const SINCE = String(Date.now() - DAY);
const CUTOFF = String(Date.now() - 30 * DAY);

const PAGE = 'SELECT id, received_at, payload, origin FROM deliveries';
const KEYSET = `received_at <= ${NOW} AND (received_at < ${NOW} OR (received_at = ${NOW} AND id < ${ID}))`;
const NEWEST = 'ORDER BY received_at DESC, id DESC LIMIT 51';
const ROUTED_WITHOUT_ROW = "(',' || d.sinks || ',') LIKE '%,nats,%' AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.delivery_id = d.id AND o.sink = 'nats')";
const WORK_PENDING = `(EXISTS (SELECT 1 FROM outbox o WHERE o.delivery_id = d.id AND o.status IN ('pending', 'dead', 'set_aside'))
  OR (d.seq IS NULL AND d.sinks IS NOT NULL AND d.sinks <> '')
  OR EXISTS (SELECT 1 FROM log_cursors c WHERE c.part = d.part AND d.seq > c.seq AND (',' || d.sinks || ',') LIKE ('%,' || c.sink || ',%')
    AND NOT EXISTS (SELECT 1 FROM outbox r WHERE r.delivery_id = d.id AND r.sink = c.sink)))`;
const FORGETTABLE = `(b.state IS NULL OR b.state <> 'error') AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.box_id = b.id AND ${WORK_PENDING})`;

/** Name, statement, and the engine it runs on when only one does. */
const queriesFor = (dialect: 'sqlite' | 'postgres'): [string, string][] => ([

  ['receive: insert (dedup by id)', `INSERT INTO deliveries (id, type, box_id, created_at, received_at, attempt, payload, origin) VALUES (${ID}, 't', 'bx_1', 'c', 1, 1, 'p', NULL) ON CONFLICT (id) DO NOTHING`],
  ['receive: duplicate body compare', `SELECT payload FROM deliveries WHERE id = ${ID}`],
  ['receive: the log head (SQLite numbers as it inserts; the sequencer on PostgreSQL)', `SELECT ${logHeadSql(dialect)}`],
  ['receive: box upsert (by id)', `UPDATE boxes SET last_seen_at = ${NOW} WHERE id = 'bx_000042'`],
  ['sequencer: the queue', `SELECT id, arrival FROM deliveries WHERE seq IS NULL AND sinks IS NOT NULL ORDER BY arrival, id LIMIT 2000`, 'postgres'],
  ['fan-out: log read of a lane', `SELECT d.seq, d.part, d.id, d.sinks, d.box_id, d.payload, d.origin, d.trace_parent FROM deliveries d WHERE d.seq > 1000 AND d.seq <= 5000 AND d.part IN (0, 1, 2, 3) AND ${ROUTED_WITHOUT_ROW} ORDER BY d.seq LIMIT 100`],
  ['backlog: slice end', `SELECT seq FROM deliveries WHERE seq > 1000 ORDER BY seq LIMIT 1 OFFSET 4999`],
  ['admin events: newest page', `${PAGE} ${NEWEST}`],
  ['admin events: next page (keyset)', `${PAGE} WHERE ${KEYSET} ${NEWEST}`],
  ['admin events: ?type=', `${PAGE} WHERE type = 'box.error' ${NEWEST}`],
  ['admin events: ?type= next page', `${PAGE} WHERE type = 'box.error' AND ${KEYSET} ${NEWEST}`],
  ['admin events: ?boxId=', `${PAGE} WHERE box_id = 'bx_000042' ${NEWEST}`],
  ['admin events: ?boxId= next page', `${PAGE} WHERE box_id = 'bx_000042' AND ${KEYSET} ${NEWEST}`],
  ['admin events: ?since=', `${PAGE} WHERE received_at >= ${SINCE} ${NEWEST}`],
  ['admin events: ?type=&boxId=&since=', `${PAGE} WHERE type || '' = 'box.error' AND box_id = 'bx_000042' AND received_at >= ${SINCE} ${NEWEST}`],
  ['admin event by id / replay one', `SELECT id, type, received_at, payload, origin FROM deliveries WHERE id = ${ID}`],
  ['admin event: its log entry', `SELECT seq, part, sinks, received_at FROM deliveries WHERE id = ${ID}`],
  ['admin event deliveries (outbox rows of an event)', `SELECT sink, status, attempts, last_error, updated_at FROM outbox WHERE delivery_id = ${ID} ORDER BY id`],
  ['admin stats: accepted per type and bucket (a day at 1 h)', `WITH RECURSIVE t(type) AS (SELECT min(type) FROM deliveries UNION ALL SELECT (SELECT min(type) FROM deliveries WHERE type > t.type) FROM t WHERE t.type IS NOT NULL),
    b(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM b WHERE n + 1 < 24)
    SELECT t.type, b.n, (SELECT count(*) FROM deliveries AS d WHERE d.type = t.type AND d.received_at >= ${SINCE} + b.n * 3600000 AND d.received_at < ${SINCE} + (b.n + 1) * 3600000) AS count
    FROM t CROSS JOIN b WHERE t.type IS NOT NULL AND t.type NOT LIKE 'boxrelay.%'`],
  ['reconcile: which ids are held', `SELECT id FROM deliveries WHERE id IN (${ID}, 'evt_1', 'evt_2')`],
  ['replay: a page of the window', `SELECT id, type, origin, sinks, received_at, payload FROM deliveries WHERE received_at >= ${SINCE} AND received_at <= ${NOW} AND (received_at > ${SINCE} OR id > ${ID}) ORDER BY received_at, id LIMIT 1000`],
  ['fan-out claim: payloads', `SELECT id, payload, origin FROM deliveries WHERE id IN (${ID}, 'evt_1')`],
  ['retention: expired deliveries batch', `SELECT d.id FROM deliveries AS d WHERE d.received_at < ${CUTOFF} AND NOT ${WORK_PENDING} LIMIT 50`],
  ['retention: delete a batch of deliveries', `DELETE FROM deliveries WHERE id IN (${ID}, 'evt_1') AND NOT EXISTS (SELECT outbox.id FROM outbox WHERE outbox.delivery_id = deliveries.id)`],
  ['retention: end of a window of boxes', `SELECT b.id FROM boxes AS b WHERE b.id > 'bx_000100' ORDER BY b.id LIMIT 1 OFFSET 4999`],
  ['retention: silent boxes of a window', `SELECT b.id FROM boxes AS b WHERE b.id > 'bx_000100' AND b.id <= 'bx_005100' AND b.last_seen_at < ${CUTOFF} AND ${FORGETTABLE} ORDER BY b.id LIMIT 50`],
  ['admin boxes: a page', `SELECT id, name, state FROM boxes WHERE id > 'bx_000100' ORDER BY id LIMIT 51`],
  ['admin boxes: list by state', `SELECT id, name, state FROM boxes WHERE state = 'ready' AND id > 'bx_000100' ORDER BY id LIMIT 51`],
  ['admin boxes: search', `SELECT id, name, state FROM boxes WHERE (lower(id) LIKE '%42%' ESCAPE '\\' OR lower(name) LIKE '%42%' ESCAPE '\\') ORDER BY id LIMIT 51`],
  ['admin boxes: counts by state (the boxes gauge)', `SELECT state, count(*) FROM boxes GROUP BY state`],
  ['reconcile: boxes unchanged since', `SELECT id FROM boxes WHERE (state_changed_at < '2026-01-01' OR (state_changed_at IS NULL AND last_seen_at < ${NOW})) ORDER BY id LIMIT 100`],
] as [string, string, 'postgres'?][]).filter(([, , only]) => only === undefined || only === dialect).map(([name, query]) => [name, query]);

const url = process.argv[2];
if (!url) throw new Error('usage: explain-queries <SQLite file | postgres:// URL>');
if (isPostgresUrl(url)) {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    for (const [name, query] of queriesFor('postgres')) {
      // Inside a rolled-back transaction: EXPLAIN of a write only plans it, but be certain.
      await client.query('BEGIN');
      const plan = await client.query<{ 'QUERY PLAN': string }>(`EXPLAIN ${query}`);
      await client.query('ROLLBACK');
      process.stdout.write(`## ${name}\n${plan.rows.map((r) => r['QUERY PLAN']).join('\n')}\n\n`);
    }
  } finally {
    await client.end();
  }
} else {
  const db = new BetterSqlite3(url, { readonly: true });
  for (const [name, query] of queriesFor('sqlite')) {
    const plan = db.prepare(`EXPLAIN QUERY PLAN ${query}`).all() as { detail: string }[];
    process.stdout.write(`## ${name}\n${plan.map((r) => r.detail).join('\n')}\n\n`);
  }
  db.close();
}
