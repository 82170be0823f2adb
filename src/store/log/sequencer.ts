import type { Database } from '../engines/database.js';
import { logHeadSql } from './position.js';

/** Deliveries numbered by one transaction at most: each stays short. */
const SEQUENCE_BATCH = 2000;

/**
 * Numbers the committed deliveries that have no position yet (PostgreSQL), in the order they were
 * stored (`arrival`, from a sequence: one box's events stored in one millisecond keep it), after
 * the log's head. One sequencer at a time per log (a transaction-scoped advisory lock, keyed by the
 * schema, so logs in other schemas or databases never wait on it), and each numbering commits before
 * the next starts: a reader's snapshot sees the numbered deliveries as a prefix of the log, whatever
 * other transactions run on the server. Rows another client holds locked are left for the next run.
 */
const NUMBER = `WITH batch AS (
    SELECT id, arrival FROM deliveries WHERE seq IS NULL AND sinks IS NOT NULL
    ORDER BY arrival, id LIMIT $1 FOR UPDATE SKIP LOCKED
  ), numbered AS (
    SELECT id, row_number() OVER (ORDER BY arrival, id) AS n FROM batch
  )
  UPDATE deliveries d SET seq = head.seq + numbered.n
  FROM numbered, (SELECT ${logHeadSql('postgres')} AS seq) head
  WHERE d.id = numbered.id`;

/** Opens the numbering's transaction and waits for the log's lock, in one round trip (the simple protocol runs the three). */
const LOCK_THE_LOG = `BEGIN; SET LOCAL lock_timeout = '5s'; SELECT pg_advisory_xact_lock(hashtextextended('boxrelay log ' || current_schema(), 0))`;

/** Gives positions to what was stored; resolves with how many it numbered. */
export type SequenceLog = () => Promise<number>;

export function createSequencer(database: Extract<Database, { dialect: 'postgres' }>): SequenceLog {
  const numberOnce = async (): Promise<number> => {
    const client = await database.connectOwn('sequencer');
    try {
      // One round trip; a DDL lock held by someone else fails this run (tried again) rather than hanging it.
      await client.query(LOCK_THE_LOG);
      const { rowCount } = await client.query({ name: 'boxrelay_number_log', text: NUMBER, values: [SEQUENCE_BATCH] });
      await client.query('COMMIT');
      return rowCount ?? 0;
    } catch (error) {
      await client.query('ROLLBACK').catch(() => {});
      throw error;
    } finally {
      client.release();
    }
  };
  return async () => {
    let numbered = 0;
    for (let batch = SEQUENCE_BATCH; batch === SEQUENCE_BATCH; numbered += batch) batch = await numberOnce();
    return numbered;
  };
}

export interface Sequencing {
  /** New deliveries were committed here: number them soon. */
  request(): void;
  stop(): Promise<void>;
}

export interface SequencingOptions {
  sequence: SequenceLog;
  /** After a run that numbered deliveries: the fan-out has new log entries. */
  onNumbered(): void;
  onError(error: unknown): void;
  /** Deliveries committed by other processes (replicas, the CLI) or left by a crash are numbered within this. */
  intervalMs: number;
}

/** Runs the sequencer after local commits (coalesced: one run at a time, one more if asked meanwhile) and on an interval. */
export function startSequencing({ sequence, onNumbered, onError, intervalMs }: SequencingOptions): Sequencing {
  let running: Promise<void> | undefined;
  let again = false;
  let stopped = false;
  const run = (): void => {
    if (stopped) return;
    if (running) {
      again = true;
      return;
    }
    again = false;
    running = sequence()
      .then((numbered) => {
        if (numbered > 0) onNumbered();
      }, onError)
      .finally(() => {
        running = undefined;
        if (again) run();
      });
  };
  const timer = setInterval(run, intervalMs).unref();
  return {
    request: run,
    async stop() {
      stopped = true;
      clearInterval(timer);
      await running;
    },
  };
}

/**
 * How long the oldest delivery without a position has waited (ms), 0 when none does. Measured by
 * the relay's clock, the one that stamped `received_at` as the delivery came in: the database's
 * clock against it would read any skew between the two as a wait (or hide one).
 */
export async function unnumberedFor(database: Database, now: number): Promise<number> {
  // SQLite numbers as it inserts: nothing ever waits (and it has no index to ask).
  if (database.dialect !== 'postgres') return 0;
  const row = await database.kysely
    .selectFrom('deliveries')
    .select((eb) => eb.fn.min('received_at').as('oldest'))
    .where('seq', 'is', null)
    .where('sinks', 'is not', null)
    .executeTakeFirst();
  const oldest = row?.oldest;
  return oldest === null || oldest === undefined ? 0 : Math.max(0, now - Number(oldest));
}
