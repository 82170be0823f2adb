import { sql, type Selectable } from 'kysely';
import type { ExchangeRequest as AttemptRequest, ExchangeResponse as AttemptResponse } from '../../exchange.js';
import type { AttemptsTable } from '../schema.js';

export type { AttemptRequest, AttemptResponse };

export type AttemptOutcome = AttemptsTable['outcome'];

/** One attempt to write down. */
export interface NewAttempt {
  eventId: string;
  sink: string;
  /** Epoch ms when it started. */
  at: number;
  durationMs: number;
  outcome: AttemptOutcome;
  status: number | null;
  error: { code: string; message: string } | null;
  /** The receiver or broker answered (its latency counts in health). */
  answered: boolean;
  request: AttemptRequest | null;
  response: AttemptResponse | null;
}

/** An attempt as `GET /admin/events/:id/attempts` answers it (contract section 16). */
export interface Attempt {
  sink: string;
  n: number;
  at: string;
  durationMs: number;
  outcome: AttemptOutcome;
  status: number | null;
  error: { code: string; message: string } | null;
  request: AttemptRequest | null;
  response: AttemptResponse | null;
}

/** A failed attempt, as the partial index `attempts_failed` is written (a literal, so both engines use that index). */
export const FAILED_ATTEMPT = sql<boolean>`outcome <> 'delivered'`;

/** The most attempts kept per event and sink: the newest. */
export const KEPT_PER_EVENT_AND_SINK = 50;

export const attemptColumns = ['id', 'sink', 'n', 'at', 'duration_ms', 'outcome', 'status', 'error_code', 'error_message', 'request', 'response'] as const;

export function toAttempt(row: Pick<Selectable<AttemptsTable>, (typeof attemptColumns)[number]>): Attempt {
  return {
    sink: row.sink,
    n: Number(row.n),
    at: new Date(Number(row.at)).toISOString(),
    durationMs: Number(row.duration_ms),
    outcome: row.outcome,
    status: row.status === null ? null : Number(row.status),
    error: row.error_code === null ? null : { code: row.error_code, message: row.error_message ?? '' },
    request: row.request === null ? null : (JSON.parse(row.request) as AttemptRequest),
    response: row.response === null ? null : (JSON.parse(row.response) as AttemptResponse),
  };
}
