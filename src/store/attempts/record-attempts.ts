import { sql, type Kysely } from 'kysely';
import { runTransaction, runStatementTransaction } from '../engines/transactions.js';
import type { Database } from '../engines/database.js';
import { once } from '../engines/sqlite-writes.js';
import { runEachUnsynced } from '../engines/unsynced.js';
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
 * The same insert of one row as SQLite runs it for a batch of successes: one text, prepared once,
 * with no query built per row (building and compiling one costs more than running it).
 */
const SQLITE_INSERT_ONE = `INSERT INTO attempts (event_id, sink, n, at, duration_ms, outcome, status, error_code, error_message, answered, request, response)
  VALUES (?, ?, (SELECT coalesce(max(n), 0) + 1 FROM attempts WHERE event_id = ? AND sink = ?), ?, ?, ?, ?, ?, ?, ?, ?, ?)`;

const sqliteRow = (a: NewAttempt): unknown[] => [
  a.eventId,
  a.sink,
  a.eventId,
  a.sink,
  a.at,
  Math.round(a.durationMs),
  a.outcome,
  a.status,
  a.error?.code ?? null,
  a.error?.message ?? null,
  a.answered ? 1 : 0,
  json(a.request),
  json(a.response),
];

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
      const statements = attempts.flatMap((attempt) => [insert(db, [attempt]).compile(), trimAttempts(db, attempt.eventId, attempt.sink).compile()]);
      await runStatementTransaction(database, [...statements, ...addToMinutes(attempts)].map((query) => once(query)));
    },
    async recordDelivered(attempts) {
      if (attempts.length === 0) return;
      // SQLite: one row per statement, all in one transaction; PostgreSQL: one statement for the batch.
      if (database.dialect === 'sqlite') {
        await runEachUnsynced(database, [{ sql: SQLITE_INSERT_ONE, rows: attempts.map(sqliteRow) }, ...addToMinutes(attempts).map((query) => once(query))]);
        return;
      }
      await runTransaction(database, function* () {
        yield postgresInsertMany(attempts).compile(db);
        yield* addToMinutes(attempts);
      });
    },
    async countAttempts(attempts) {
      const sums = addToMinutes(attempts);
      if (database.dialect === 'sqlite') return void (await runEachUnsynced(database, sums.map((query) => once(query))));
      await runTransaction(database, function* () {
        yield* sums;
      });
    },
  };
}
