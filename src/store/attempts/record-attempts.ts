import { sql, type Kysely } from 'kysely';
import { atomically } from '../engines/atomically.js';
import type { Database } from '../engines/database.js';
import { inUnsyncedTransaction, once, runEachUnsynced, type SqliteDatabase } from '../engines/unsynced.js';
import type { Schema } from '../schema.js';
import { minuteSumWriter } from './attempt-minutes.js';
import { KEPT_PER_EVENT_AND_SINK, type NewAttempt } from './attempt-rows.js';

/**
 * Where the fan-out writes its attempts (in the worker thread, a call served by the main thread).
 * Each call also adds its attempts to the per-minute sums health reads, in the same transaction.
 */
export interface AttemptLog {
  /**
   * Failed attempts, each durable before the call returns (their outcome counts only then); the
   * oldest beyond the last 50 of their event and sink are removed.
   */
  recordFailed(attempts: NewAttempt[]): Promise<void>;
  /** Successful attempts, in a batch, committed without a sync of their own (a crash may lose them). */
  recordDelivered(attempts: NewAttempt[]): Promise<void>;
  /** Attempts not kept one by one (`BOXRELAY_ATTEMPTS`): only counted in the sums, as recordDelivered commits. */
  countAttempts(attempts: NewAttempt[]): Promise<void>;
}

/** `n` goes on from the event and sink's last attempt, across resends. */
const nextN = (db: Kysely<Schema>, attempt: NewAttempt) =>
  db
    .selectFrom('attempts')
    .select(sql<number>`coalesce(max(n), 0) + 1`.as('n'))
    .where('event_id', '=', attempt.eventId)
    .where('sink', '=', attempt.sink);

const json = (value: object | null): string | null => value && JSON.stringify(value);

const insert = (db: Kysely<Schema>, attempts: NewAttempt[]) =>
  db.insertInto('attempts').values(
    attempts.map((a) => ({
      event_id: a.eventId,
      sink: a.sink,
      n: nextN(db, a),
      at: a.at,
      duration_ms: Math.round(a.durationMs),
      outcome: a.outcome,
      status: a.status,
      error_code: a.error?.code ?? null,
      error_message: a.error?.message ?? null,
      answered: a.answered ? 1 : 0,
      request: json(a.request),
      response: json(a.response),
    })),
  );

/**
 * SQLite's insert of one success of a batch: one text, prepared once, with no query built per row
 * (building and compiling one costs more than running it). Its `n` comes from SQLITE_LAST_N.
 */
const SQLITE_INSERT_ONE = `INSERT INTO attempts (event_id, sink, n, at, duration_ms, outcome, status, error_code, error_message, answered, request, response)
  VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`;

/**
 * The last `n` of each event and sink of a batch (null for none), read in one statement before the
 * inserts: looked up by a subquery in each row's insert instead, it cost three times the insert.
 */
const SQLITE_LAST_N = `SELECT p.value ->> 0 AS eventId, p.value ->> 1 AS sink,
  (SELECT max(a.n) FROM attempts a WHERE a.event_id = p.value ->> 0 AND a.sink = p.value ->> 1) AS n
  FROM json_each(?) p`;

const attemptKey = (eventId: string, sink: string) => `${eventId}\n${sink}`;

/** SQLite's write of a batch of successes, `n` going on from each event and sink's last attempt (a batch may hold two of one). */
function sqliteInsertMany(prepare: SqliteDatabase['prepare'], attempts: readonly NewAttempt[]): void {
  const pairs = new Map(attempts.map((a) => [attemptKey(a.eventId, a.sink), [a.eventId, a.sink]]));
  const last = new Map<string, number>();
  for (const row of prepare(SQLITE_LAST_N).all(JSON.stringify([...pairs.values()])) as { eventId: string; sink: string; n: number | null }[]) {
    last.set(attemptKey(row.eventId, row.sink), row.n ?? 0);
  }
  const insertOne = prepare(SQLITE_INSERT_ONE);
  for (const a of attempts) {
    const key = attemptKey(a.eventId, a.sink);
    const n = (last.get(key) ?? 0) + 1;
    last.set(key, n);
    insertOne.run(a.eventId, a.sink, n, a.at, Math.round(a.durationMs), a.outcome, a.status, a.error?.code ?? null, a.error?.message ?? null, a.answered ? 1 : 0, json(a.request), json(a.response));
  }
}

/** Removes an event and sink's attempts beyond the newest 50. */
export const trimAttempts = (db: Kysely<Schema>, eventId: string, sink: string) =>
  db
    .deleteFrom('attempts')
    .where('event_id', '=', eventId)
    .where('sink', '=', sink)
    .where('n', '<=', (eb) =>
      eb
        .selectFrom('attempts as newest')
        .select(sql<number>`max(newest.n) - ${KEPT_PER_EVENT_AND_SINK}`.as('oldest'))
        .where('newest.event_id', '=', eventId)
        .where('newest.sink', '=', sink),
    );

/**
 * PostgreSQL's insert of a batch: one array per column, so the statement (and the `n` subquery) is
 * planned once per batch, not once per row as a multi-row VALUES list would be.
 */
const postgresInsertMany = (attempts: NewAttempt[]) => {
  const column = <T>(pick: (a: NewAttempt) => T): T[] => attempts.map(pick);
  return sql`INSERT INTO attempts (event_id, sink, n, at, duration_ms, outcome, status, error_code, error_message, answered, request, response)
    SELECT u.event_id, u.sink, (SELECT coalesce(max(a.n), 0) + 1 FROM attempts a WHERE a.event_id = u.event_id AND a.sink = u.sink),
      u.at, u.duration_ms, u.outcome, u.status, u.error_code, u.error_message, u.answered, u.request, u.response
    FROM unnest(${column((a) => a.eventId)}::text[], ${column((a) => a.sink)}::text[], ${column((a) => a.at)}::bigint[],
      ${column((a) => Math.round(a.durationMs))}::int[], ${column((a) => a.outcome)}::text[], ${column((a) => a.status)}::int[],
      ${column((a) => a.error?.code ?? null)}::text[], ${column((a) => a.error?.message ?? null)}::text[],
      ${column((a) => (a.answered ? 1 : 0))}::int[], ${column((a) => json(a.request))}::text[], ${column((a) => json(a.response))}::text[])
      AS u(event_id, sink, at, duration_ms, outcome, status, error_code, error_message, answered, request, response)`;
};

export function createAttemptLog(database: Database): AttemptLog {
  const db = database.kysely;
  const addToMinutes = minuteSumWriter(db);
  return {
    async recordFailed(attempts) {
      await atomically(database, function* () {
        for (const attempt of attempts) {
          yield insert(db, [attempt]).compile();
          yield trimAttempts(db, attempt.eventId, attempt.sink).compile();
        }
        yield* addToMinutes(attempts);
      });
    },
    async recordDelivered(attempts) {
      if (attempts.length === 0) return;
      // SQLite: one lookup, then one row per statement, all in one transaction; PostgreSQL: one statement for the batch.
      if (database.dialect === 'sqlite') {
        const sums = addToMinutes(attempts);
        return inUnsyncedTransaction(database, (prepare) => {
          sqliteInsertMany(prepare, attempts);
          for (const sum of sums) prepare(sum.sql).run(...sum.parameters);
        });
      }
      await atomically(database, function* () {
        yield postgresInsertMany(attempts).compile(db);
        yield* addToMinutes(attempts);
      });
    },
    async countAttempts(attempts) {
      const sums = addToMinutes(attempts);
      if (database.dialect === 'sqlite') return runEachUnsynced(database, sums.map(once));
      await atomically(database, function* () {
        yield* sums;
      });
    },
  };
}
