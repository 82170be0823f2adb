import { RelayError, StorageUnavailableError } from '../../errors.js';
import { groupCommit, type Outcome } from '../../group-commit.js';
import { walkSteps, type NamedTransaction, type StatementResult } from '../engines/transactions.js';
import type { Database } from '../engines/database.js';
import { runStatements, type SqliteWriter } from '../engines/sqlite-writes.js';
import { unsynced } from '../engines/unsynced.js';
import { ensureCursorsQuery } from '../log/cursors.js';
import { INSERT_LOGGED_DELIVERY, SELECT_PAYLOAD, UPSERT_BOX, boxParams, deliveryParams, type DeliveryWriter, type NewDelivery, type RecordResult } from './delivery-sql.js';

/** A transaction sent by a name the writer does not know (`WRITER_TRANSACTIONS`). */
export class NoSuchTransactionError extends RelayError {
  readonly code = 'no_such_transaction';
  constructor(name: string) {
    super(`the SQLite writer knows no transaction named ${name}`);
  }
}

interface Work {
  /** Runs inside the turn's transaction, in a savepoint of its own. */
  run(): unknown;
  /** Needs the commit's fsync (synchronous as configured); a turn of unsynced work only commits at NORMAL. */
  synced: boolean;
  /** A delivery: its commit wakes the fan-out when it is new. */
  delivery: boolean;
}

/** A delivery that could not be stored is the receiver's 503 (the sender retries); its cause is why. */
const refusal = (error: unknown) => new StorageUnavailableError({ cause: error });

/** A delivery's outcome that stored it (not a duplicate). */
const isNew = (outcome: Outcome<unknown> | undefined): boolean => outcome !== undefined && 'value' in outcome && !(outcome.value as RecordResult).duplicate;

/**
 * The one writer of a SQLite file: the deliveries, and every write other connections send it.
 * Group commit: everything handed over within one turn of the event loop (the deliveries, and the
 * writes other connections send: cursor moves, claims, attempts, admin writes, retention's batches)
 * shares one IMMEDIATE transaction and so one fsync, which is what makes synchronous=FULL
 * affordable (`groupCommit`). Each runs in a savepoint of its own, so one that fails fails alone;
 * each caller is answered only after the commit.
 */
export function createSqliteWriter(
  database: Extract<Database, { dialect: 'sqlite' }>,
  { onCommit = () => {}, transactions = [] }: { onCommit?: () => void; transactions?: readonly NamedTransaction<never, unknown>[] } = {},
): DeliveryWriter & SqliteWriter {
  const { sqlite } = database;
  const byName = new Map(transactions.map((transaction) => [transaction.name, transaction]));
  /**
   * Sinks known to have their log cursors: one routed to for the first time gets them, at the head,
   * in the same transaction; known only once that commits (a rolled-back delivery or batch made none).
   */
  const withCursors = new Set<string>();
  let cursorsMade: string[] = [];
  const ensureCursors = (sinks: string[]): void => {
    for (const sink of sinks) {
      if (withCursors.has(sink) || cursorsMade.includes(sink)) continue;
      const { sql, parameters } = ensureCursorsQuery(database.kysely, database, sink, Date.now()).compile();
      database.prepare(sql).run(...parameters);
      cursorsMade.push(sink);
    }
  };
  const insertDelivery = sqlite.prepare(INSERT_LOGGED_DELIVERY);
  const upsertBox = sqlite.prepare(UPSERT_BOX);
  const selectPayload = sqlite.prepare<[string], { payload: string }>(SELECT_PAYLOAD);

  const writeOne = (delivery: NewDelivery): RecordResult => {
    ensureCursors(delivery.sinks);
    if (insertDelivery.run(...deliveryParams(delivery)).changes === 0) {
      const stored = selectPayload.get(delivery.event.id);
      return { duplicate: true, payloadDiffers: stored?.payload !== delivery.event.payload };
    }
    const box = boxParams(delivery);
    if (box) upsertBox.run(...box);
    return { duplicate: false, payloadDiffers: false };
  };

  // Nested in the turn's transaction, better-sqlite3 runs it as a savepoint.
  const inSavepoint = sqlite.transaction((work: Work) => work.run());
  const writeTurn = sqlite.transaction((batch: Work[]) =>
    batch.map((work): Outcome<unknown> => {
      const made = cursorsMade.length;
      try {
        return { value: inSavepoint(work) };
      } catch (error) {
        // Some failures (a full disk, an I/O error) end the whole transaction: then nothing of the turn stands.
        if (!sqlite.inTransaction) throw error;
        cursorsMade.length = made;
        return { error: work.delivery ? refusal(error) : error };
      }
    }),
  );
  const commitTurn = (batch: Work[]): Outcome<unknown>[] => {
    cursorsMade = [];
    let outcomes: Outcome<unknown>[];
    try {
      outcomes = batch.some((work) => work.synced) ? writeTurn.immediate(batch) : unsynced(database, () => writeTurn.immediate(batch));
    } catch (error) {
      return batch.map((work) => ({ error: work.delivery ? refusal(error) : error }));
    }
    for (const sink of cursorsMade) withCursors.add(sink);
    if (batch.some((work, i) => work.delivery && isNew(outcomes[i]))) onCommit();
    return outcomes;
  };
  // The writes of a turn share its transaction: synchronous, so nothing comes while it runs.
  const turns = groupCommit<Work, unknown>({ commit: commitTurn });
  const queued = <T>(run: () => T, { synced = true, delivery = false }: { synced?: boolean; delivery?: boolean } = {}): Promise<T> =>
    turns.add({ run, synced, delivery }) as Promise<T>;

  return {
    record: (delivery) => queued(() => writeOne(delivery), { delivery: true }),
    write: (statements, durability) => queued((): StatementResult[] => runStatements(database.prepare, statements), { synced: durability === 'synced' }),
    runNamedTransaction(name, args) {
      const transaction = byName.get(name);
      if (!transaction) return Promise.reject(new NoSuchTransactionError(name));
      return queued(() => walkSteps(database, transaction.steps(database, args as never)));
    },
  };
}
