/**
 * A store of months in production, written with set-based SQL into a database the relay migrated:
 * deliveries in the log (routed to three hooks, with box rows and cursors past most of them), three
 * attempts a delivery, dead letters and retries in the outbox, per-minute counts, and the backlog
 * of a hook an operator paused and is about to remove. One SQL text for both engines but for a few
 * expressions; nothing goes through HTTP.
 */
import BetterSqlite3 from 'better-sqlite3';
import pg from 'pg';
import { DAY_MS } from '../src/clock.js';
import { PARTS, partOf } from '../src/store/log/position.js';
import { BOX_COUNT, boxIdOf } from './deliveries.js';

export interface VolumeShape {
  deliveries: number;
  /** The deliveries are spread evenly over this many days before now (past the retention window, so retention has work). */
  days: number;
  /** The newest deliveries the removed hook has not read (its backlog), of `deliveries`. */
  backlog: number;
}

/** The hooks every delivery was routed to; the last is paused by an operator, with a backlog, and removed for the set-aside. */
export const VOLUME_HOOKS = ['hook-a', 'hook-b', 'hook-gone'] as const;
export const REMOVED_HOOK = VOLUME_HOOKS[2];

/** Deliveries stored per statement. */
const CHUNK = 100_000;
/** The older half of the store spreads over every box, the newer over fewer: retention has boxes to forget too. */
const RECENT_BOXES = Math.floor(BOX_COUNT * 0.8);
/** One delivery in this many was dead-lettered by hook-b. */
const DEAD_EVERY = 1000;
/** One delivery of the backlog in this many has a pending outbox row of the removed hook (a retry it never made). */
const PENDING_EVERY = 100;

type Dialect = 'sqlite' | 'postgres';

interface Executor {
  dialect: Dialect;
  run(statement: string): Promise<void>;
}

const series = (dialect: Dialect, from: number, to: number): string =>
  dialect === 'postgres'
    ? `(SELECT i FROM generate_series(${from}, ${to}) AS g(i)) AS s`
    : `(WITH RECURSIVE c(i) AS (SELECT ${from} UNION ALL SELECT i + 1 FROM c WHERE i < ${to}) SELECT i FROM c) AS s`;

/** `evt_` and 32 hex digits, scattered over the id index as the upstream's random ids are. */
const eventId = (dialect: Dialect, i: string): string =>
  dialect === 'postgres'
    ? `'evt_' || md5(${i}::text)`
    : `printf('evt_%08x%08x%016x', (${i} * 2654435761) % 4294967296, (${i} * 2246822519) % 4294967296, ${i})`;

const isoOf = (dialect: Dialect, ms: string): string =>
  dialect === 'postgres'
    ? `to_char(to_timestamp((${ms}) / 1000.0) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`
    : `strftime('%Y-%m-%dT%H:%M:%fZ', (${ms}) / 1000.0, 'unixepoch')`;

const NOTES = 'x'.repeat(150);
const REQUEST = JSON.stringify({ url: 'http://127.0.0.1/hook', headers: { 'content-type': 'application/cloudevents+json', 'webhook-id': 'msg' } });
const RESPONSE = JSON.stringify({ headers: { 'content-type': 'text/plain' }, body: '', bodyTruncated: false });

/** The statements, in order, that fill a migrated, empty store with `shape` ending a minute before `now`. */
function seedStatements(dialect: Dialect, shape: VolumeShape, now: number): { label: string; sql: string }[] {
  const n = shape.deliveries;
  const start = now - shape.days * DAY_MS;
  const span = shape.days * DAY_MS - 60_000;
  /** The last position the removed hook read. */
  const read = n - shape.backlog;
  const statements: { label: string; sql: string }[] = [
    { label: 'boxes of the seed', sql: 'CREATE TEMP TABLE seed_boxes (b integer PRIMARY KEY, id text NOT NULL, part integer NOT NULL)' },
    {
      label: 'boxes of the seed',
      sql: `INSERT INTO seed_boxes (b, id, part) VALUES ${Array.from({ length: BOX_COUNT }, (_, b) => `(${b}, '${boxIdOf(b)}', ${partOf(boxIdOf(b))})`).join(', ')}`,
    },
    { label: 'sinks of the seed', sql: 'CREATE TEMP TABLE seed_sinks (k integer PRIMARY KEY, sink text NOT NULL)' },
    { label: 'sinks of the seed', sql: `INSERT INTO seed_sinks (k, sink) VALUES ${VOLUME_HOOKS.map((sink, k) => `(${k}, '${sink}')`).join(', ')}` },
  ];
  const at = `(${start} + (CAST(i AS bigint) * ${span}) / ${n})`;
  for (let from = 1; from <= n; from += CHUNK) {
    const to = Math.min(n, from + CHUNK - 1);
    statements.push({
      label: `deliveries ${from.toLocaleString('en')}-${to.toLocaleString('en')}`,
      sql: `INSERT INTO deliveries (id, type, box_id, created_at, received_at, attempt, payload, origin, seq, part, sinks)
        SELECT e.id, e.type, x.id, e.created, e.at, 1,
          '{"id":"' || e.id || '","type":"' || e.type || '","createdAt":"' || e.created || '","data":{"box":{"id":"' || x.id ||
          '","name":"ci-' || x.b || '"},"previousState":"cloning","state":"ready","labels":{"team":"platform","region":"eu-west-1"},"notes":"${NOTES}"}}',
          NULL, e.i, x.part, '${VOLUME_HOOKS.join(',')}'
        FROM (SELECT i, ${eventId(dialect, 'i')} AS id,
                CASE i % 5 WHEN 2 THEN 'box.error' WHEN 3 THEN 'box.archived' WHEN 4 THEN 'box.hydrated' ELSE 'box.ready' END AS type,
                ${at} AS at, ${isoOf(dialect, `${at} - 50`)} AS created,
                CASE WHEN 2 * i <= ${n} THEN i % ${BOX_COUNT} ELSE i % ${RECENT_BOXES} END AS b
              FROM ${series(dialect, from, to)}) AS e
        JOIN seed_boxes x ON x.b = e.b
        ORDER BY e.i`,
    });
    // Per delivery, one attempt a hook; in the backlog the removed hook made none and hook-a needed a retry.
    const retried = `(k.k = 2 AND d.seq > ${read})`;
    statements.push({
      label: `attempts of deliveries ${from.toLocaleString('en')}-${to.toLocaleString('en')}`,
      sql: `INSERT INTO attempts (event_id, sink, n, at, duration_ms, outcome, status, error_code, error_message, answered, request, response)
        SELECT d.id, CASE WHEN ${retried} THEN 'hook-a' ELSE k.sink END, CASE WHEN ${retried} THEN 2 ELSE 1 END,
          d.received_at + 20 + CASE WHEN ${retried} THEN 60000 ELSE 5 * k.k END,
          5 + (d.seq * 7 + k.k * 13) % 200,
          CASE WHEN k.k = 0 AND d.seq > ${read} THEN 'retried' WHEN k.k = 1 AND d.seq % ${DEAD_EVERY} = 0 THEN 'dead_lettered' ELSE 'delivered' END,
          CASE WHEN k.k = 0 AND d.seq > ${read} THEN 503 WHEN k.k = 1 AND d.seq % ${DEAD_EVERY} = 0 THEN 500 ELSE 200 END,
          CASE WHEN k.k = 0 AND d.seq > ${read} OR k.k = 1 AND d.seq % ${DEAD_EVERY} = 0 THEN 'http_status' END,
          CASE WHEN k.k = 0 AND d.seq > ${read} THEN 'HTTP 503' WHEN k.k = 1 AND d.seq % ${DEAD_EVERY} = 0 THEN 'HTTP 500' END,
          1, '${REQUEST}', '${RESPONSE}'
        FROM deliveries d CROSS JOIN seed_sinks k
        WHERE d.seq >= ${from} AND d.seq <= ${to}
        ORDER BY d.seq, k.k`,
    });
  }
  const outbox = (sink: string, status: string, attempts: number, where: string) =>
    `INSERT INTO outbox (delivery_id, sink, status, attempts, next_attempt_at, last_error, lease_owner, lease_until, created_at, updated_at, box_id, trace_parent)
      SELECT id, '${sink}', '${status}', ${attempts}, received_at + 60000, ${status === 'dead' ? "'http_status: HTTP 500'" : 'NULL'}, NULL, NULL,
        received_at, received_at + 60000, box_id, NULL
      FROM deliveries WHERE ${where} ORDER BY seq`;
  const minutes = Math.floor(shape.days * 1440);
  const firstMinute = Math.floor(start / 60_000) * 60_000;
  statements.push(
    {
      label: 'boxes',
      sql: `INSERT INTO boxes (id, name, state, previous_state, state_changed_at, last_event_id, hydrated_at, last_seen_at)
        SELECT box_id, 'ci', 'ready', 'cloning', max(created_at), max(id), NULL, max(received_at) FROM deliveries GROUP BY box_id`,
    },
    { label: 'dead letters', sql: outbox('hook-b', 'dead', 1, `seq % ${DEAD_EVERY} = 0`) },
    { label: 'retried rows', sql: outbox('hook-a', 'delivered', 2, `seq > ${read}`) },
    { label: 'pending rows of the removed hook', sql: outbox(REMOVED_HOOK, 'pending', 0, `seq > ${read} AND seq % ${PENDING_EVERY} = 0`) },
    {
      label: 'log cursors',
      sql: `INSERT INTO log_cursors (sink, part, seq, lease_owner, lease_until, updated_at) VALUES ${VOLUME_HOOKS.flatMap((sink) =>
        PARTS.map((part) => `('${sink}', ${part}, ${sink === REMOVED_HOOK ? read : n}, NULL, NULL, ${now})`),
      ).join(', ')}`,
    },
    {
      label: 'paused hook',
      sql: `INSERT INTO sink_state (sink, failing_since, paused_at, paused_by, next_probe_at) VALUES ('${REMOVED_HOOK}', NULL, ${now - DAY_MS}, 'operator', NULL)`,
    },
    {
      label: 'per-minute counts',
      sql: `INSERT INTO sink_minutes (sink, minute, delivered, failed)
        SELECT k.sink, ${firstMinute} + CAST(i AS bigint) * 60000, ${Math.max(1, Math.round(n / minutes))}, 0
        FROM ${series(dialect, 0, minutes - 1)} CROSS JOIN seed_sinks k`,
    },
    { label: 'cleanup', sql: 'DROP TABLE seed_boxes' },
    { label: 'cleanup', sql: 'DROP TABLE seed_sinks' },
  );
  return statements;
}

/** Runs the statements, logging the slow ones. */
async function seed(executor: Executor, shape: VolumeShape, now: number, log: (line: string) => void): Promise<void> {
  for (const { label, sql } of seedStatements(executor.dialect, shape, now)) {
    const started = performance.now();
    await executor.run(sql);
    const seconds = (performance.now() - started) / 1000;
    if (seconds > 5) log(`bench: volume seed (${executor.dialect}): ${label} in ${seconds.toFixed(1)} s`);
  }
}

/** Seeds a migrated SQLite file; unsynchronised, since only the end state matters. */
export async function seedSqlite(file: string, shape: VolumeShape, now: number, log: (line: string) => void): Promise<void> {
  const db = new BetterSqlite3(file);
  try {
    // OFF is refused by this build (defensive mode); a rollback journal in memory costs as little.
    db.pragma('journal_mode = MEMORY');
    db.pragma('synchronous = OFF');
    db.pragma('cache_size = -1048576');
    await seed({ dialect: 'sqlite', run: async (sql) => void db.exec(sql) }, shape, now, log);
    db.pragma('journal_mode = WAL');
  } finally {
    db.close();
  }
}

/** Seeds a migrated PostgreSQL database and leaves it vacuumed and analysed, as autovacuum would. */
export async function seedPostgres(url: string, shape: VolumeShape, now: number, log: (line: string) => void): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    await client.query('SET synchronous_commit = off');
    await seed({ dialect: 'postgres', run: async (sql) => void (await client.query(sql)) }, shape, now, log);
    await client.query('VACUUM ANALYZE');
  } finally {
    await client.end();
  }
}

/** Rows the removed hook's work becomes when it is set aside: its backlog in the log and its pending rows. */
export const setAsideRows = (shape: VolumeShape): number => shape.backlog;
