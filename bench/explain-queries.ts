/**
 * The query plans behind the storage layout: every statement the admin API, console, retention,
 * reconciliation and fan-out run on deliveries, boxes and outbox (as src/store builds them), explained
 * on a grown database. `node dist/bench/explain-queries.js <SQLite file | postgres:// URL>`.
 * Only plans are printed; nothing is written.
 */
import BetterSqlite3 from 'better-sqlite3';
import pg from 'pg';
import { isPostgresUrl } from '../src/store/engines/database.js';

const ID = "'evt_00000000000000000000000000000000'";
const NOW = String(Date.now());
const DAY = 86_400_000;
const SINCE = String(Date.now() - DAY);
const CUTOFF = String(Date.now() - 30 * DAY);

const QUERIES: [string, string][] = [
  ['receive: insert (dedup by id)', `INSERT INTO deliveries (id, type, box_id, created_at, received_at, attempt, payload, origin) VALUES (${ID}, 't', 'bx_1', 'c', 1, 1, 'p', NULL) ON CONFLICT (id) DO NOTHING`],
  ['receive: duplicate body compare', `SELECT payload FROM deliveries WHERE id = ${ID}`],
  ['admin events: newest page', `SELECT id, received_at, payload, origin FROM deliveries ORDER BY received_at DESC, id DESC LIMIT 51`],
  ['admin events: next page (keyset)', `SELECT id, received_at, payload, origin FROM deliveries WHERE received_at <= ${NOW} AND (received_at < ${NOW} OR (received_at = ${NOW} AND id < ${ID})) ORDER BY received_at DESC, id DESC LIMIT 51`],
  ['admin events: ?type=', `SELECT id, received_at, payload, origin FROM deliveries WHERE type = 'box.error' ORDER BY received_at DESC, id DESC LIMIT 51`],
  ['admin events: ?type= next page', `SELECT id, received_at, payload, origin FROM deliveries WHERE type = 'box.error' AND received_at <= ${NOW} AND (received_at < ${NOW} OR (received_at = ${NOW} AND id < ${ID})) ORDER BY received_at DESC, id DESC LIMIT 51`],
  ['admin events: ?boxId=', `SELECT id, received_at, payload, origin FROM deliveries WHERE box_id = 'bx_000042' ORDER BY received_at DESC, id DESC LIMIT 51`],
  ['admin events: ?boxId= next page', `SELECT id, received_at, payload, origin FROM deliveries WHERE box_id = 'bx_000042' AND received_at <= ${NOW} AND (received_at < ${NOW} OR (received_at = ${NOW} AND id < ${ID})) ORDER BY received_at DESC, id DESC LIMIT 51`],
  ['admin events: ?since=', `SELECT id, received_at, payload, origin FROM deliveries WHERE received_at >= ${SINCE} ORDER BY received_at DESC, id DESC LIMIT 51`],
  ['admin events: ?type=&boxId=&since=', `SELECT id, received_at, payload, origin FROM deliveries WHERE type || '' = 'box.error' AND box_id = 'bx_000042' AND received_at >= ${SINCE} ORDER BY received_at DESC, id DESC LIMIT 51`],
  ['admin event by id / replay one', `SELECT id, type, received_at, payload, origin FROM deliveries WHERE id = ${ID}`],
  ['admin event deliveries (outbox rows of an event)', `SELECT sink, status, attempts, last_error, updated_at FROM outbox WHERE delivery_id = ${ID} ORDER BY id`],
  ['reconcile: which ids are held', `SELECT id FROM deliveries WHERE id IN (${ID}, 'evt_1', 'evt_2')`],
  ['replay since: types', `WITH RECURSIVE t(type) AS (SELECT min(type) FROM deliveries UNION ALL SELECT (SELECT min(type) FROM deliveries WHERE type > t.type) FROM t WHERE t.type IS NOT NULL) SELECT type FROM t WHERE type IS NOT NULL AND EXISTS (SELECT 1 FROM deliveries AS d WHERE d.type = t.type AND d.received_at >= ${SINCE})`],
  ['replay since: queue', `SELECT id, box_id FROM deliveries WHERE received_at >= ${SINCE} AND type IN ('box.ready', 'box.error') ORDER BY received_at, id`],
  ['fan-out claim: payloads', `SELECT id, payload, origin FROM deliveries WHERE id IN (${ID}, 'evt_1')`],
  ['fan-out claim: due rows', `SELECT id FROM outbox WHERE status = 'pending' AND sink = 'nats' AND next_attempt_at <= ${NOW} AND (lease_until IS NULL OR lease_until <= ${NOW}) ORDER BY next_attempt_at, id LIMIT 100`],
  ['retention: deliveries batch', `DELETE FROM deliveries WHERE id IN (SELECT d.id FROM deliveries AS d WHERE d.received_at < ${CUTOFF} AND NOT EXISTS (SELECT outbox.id FROM outbox WHERE outbox.delivery_id = d.id) LIMIT 500)`],
  ['retention: boxes batch', `DELETE FROM boxes WHERE id IN (SELECT id FROM boxes WHERE last_seen_at < ${CUTOFF} LIMIT 500)`],
  ['admin boxes: list by state', `SELECT id, name, state FROM boxes WHERE state = 'ready' AND id > 'bx_000100' ORDER BY id LIMIT 51`],
  ['admin boxes: search', `SELECT id, name, state FROM boxes WHERE (lower(id) LIKE '%42%' ESCAPE '\\' OR lower(name) LIKE '%42%' ESCAPE '\\') ORDER BY id LIMIT 51`],
  ['admin boxes: counts by state', `SELECT state, count(*) FROM boxes GROUP BY state`],
  ['reconcile: boxes unchanged since', `SELECT id FROM boxes WHERE (state_changed_at < '2026-01-01' OR (state_changed_at IS NULL AND last_seen_at < ${NOW})) ORDER BY id LIMIT 100`],
];

const url = process.argv[2];
if (!url) throw new Error('usage: explain-queries <SQLite file | postgres:// URL>');
if (isPostgresUrl(url)) {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    for (const [name, query] of QUERIES) {
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
  for (const [name, query] of QUERIES) {
    const plan = db.prepare(`EXPLAIN QUERY PLAN ${query}`).all() as { detail: string }[];
    process.stdout.write(`## ${name}\n${plan.map((r) => r.detail).join('\n')}\n\n`);
  }
  db.close();
}
