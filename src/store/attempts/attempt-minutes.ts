import { CompiledQuery, sql, type Kysely } from 'kysely';
import type { AttemptMinutesTable, AttemptStatusesTable, Schema } from '../schema.js';
import { MINUTE_MS } from '../state/stats.js';
import type { NewAttempt } from './attempt-rows.js';
import { LATENCY_COLUMNS, latencyBucket, type LatencyColumn } from './latency-buckets.js';

/** How health's `statuses` name an attempt: its HTTP status, else its failure's class or code. */
export function statusKey(status: number | null, code: string | null): string | undefined {
  if (status !== null) return String(status);
  if (code === null) return undefined;
  if (code === 'timeout') return 'timeout';
  if (code === 'connection_error') return 'connection';
  return code;
}

const later = (a: number | null, b: number | null): number | null => (a === null ? b : b === null ? a : Math.max(a, b));

function emptyMinute(sink: string, minute: number): AttemptMinutesTable {
  const row = { sink, minute, delivered: 0, retried: 0, dead_lettered: 0, last_success_at: null, last_failure_at: null, slowest_ms: 0 };
  return Object.assign(row, Object.fromEntries(LATENCY_COLUMNS.map((column) => [column, 0])) as Record<LatencyColumn, number>);
}

/** A batch of attempts summed per sink and UTC minute, and per sink, minute and status key: one row each, in key order. */
export function sumPerMinute(attempts: readonly NewAttempt[]): { minutes: AttemptMinutesTable[]; statuses: AttemptStatusesTable[] } {
  const minutes = new Map<string, AttemptMinutesTable>();
  const statuses = new Map<string, AttemptStatusesTable>();
  for (const attempt of attempts) {
    const minute = Math.floor(attempt.at / MINUTE_MS) * MINUTE_MS;
    const key = `${minute}\n${attempt.sink}`;
    let row = minutes.get(key);
    if (!row) minutes.set(key, (row = emptyMinute(attempt.sink, minute)));
    row[attempt.outcome] += 1;
    if (attempt.outcome === 'delivered') row.last_success_at = later(row.last_success_at, attempt.at);
    else row.last_failure_at = later(row.last_failure_at, attempt.at);
    if (attempt.answered) {
      const durationMs = Math.round(attempt.durationMs);
      row[LATENCY_COLUMNS[latencyBucket(durationMs)]!] += 1;
      row.slowest_ms = Math.max(row.slowest_ms, durationMs);
    }
    const status = statusKey(attempt.status, attempt.error?.code ?? null);
    if (status === undefined) continue;
    const statusRow = statuses.get(`${key}\n${status}`);
    if (statusRow) statusRow.attempts += 1;
    else statuses.set(`${key}\n${status}`, { sink: attempt.sink, minute, status, attempts: 1 });
  }
  // In key order: every transaction then takes the rows' locks in the same order (PostgreSQL: no deadlock between replicas).
  const byKey = (a: { sink: string; minute: number }, b: { sink: string; minute: number }) => (a.sink < b.sink ? -1 : a.sink > b.sink ? 1 : a.minute - b.minute);
  return {
    minutes: [...minutes.values()].sort(byKey),
    statuses: [...statuses.values()].sort((a, b) => byKey(a, b) || (a.status < b.status ? -1 : a.status > b.status ? 1 : 0)),
  };
}

const plus = (table: string, column: string) => sql<number>`${sql.ref(`${table}.${column}`)} + ${sql.ref(`excluded.${column}`)}`;
const latest = (table: string, column: string) => {
  const stored = sql.ref(`${table}.${column}`);
  const added = sql.ref(`excluded.${column}`);
  return sql<number>`CASE WHEN ${added} IS NULL OR ${stored} >= ${added} THEN ${stored} ELSE ${added} END`;
};

/**
 * The statements that add a batch's sums to the stored ones: one upsert per sink and minute (and
 * per status), however many attempts the batch holds. Run in the transaction that writes the
 * attempts themselves, or alone when they are not kept (`BOXRELAY_ATTEMPTS`). Each upsert is
 * compiled once, here: a row's values are its parameters, in its columns' order (building and
 * compiling a statement of 55 columns costs more than running it).
 */
export function minuteSumWriter(db: Kysely<Schema>): (attempts: readonly NewAttempt[]) => CompiledQuery[] {
  const counted = ['delivered', 'retried', 'dead_lettered', ...LATENCY_COLUMNS] as const;
  const addMinute = db
    .insertInto('attempt_minutes')
    .values(emptyMinute('', 0))
    .onConflict((oc) =>
      oc.columns(['sink', 'minute']).doUpdateSet({
        ...Object.fromEntries(counted.map((column) => [column, plus('attempt_minutes', column)])),
        last_success_at: latest('attempt_minutes', 'last_success_at'),
        last_failure_at: latest('attempt_minutes', 'last_failure_at'),
        slowest_ms: latest('attempt_minutes', 'slowest_ms'),
      }),
    )
    .compile().sql;
  const addStatus = db
    .insertInto('attempt_statuses')
    .values({ sink: '', minute: 0, status: '', attempts: 0 })
    .onConflict((oc) => oc.columns(['sink', 'minute', 'status']).doUpdateSet({ attempts: plus('attempt_statuses', 'attempts') }))
    .compile().sql;
  return (attempts) => {
    const { minutes, statuses } = sumPerMinute(attempts);
    return [
      ...minutes.map((row) => CompiledQuery.raw(addMinute, Object.values(row))),
      ...statuses.map((row) => CompiledQuery.raw(addStatus, [row.sink, row.minute, row.status, row.attempts])),
    ];
  };
}
