import pg from 'pg';
import { RelayError, StorageUnavailableError } from '../../errors.js';
import { groupCommit, type Outcome } from '../../group-commit.js';
import type { Database } from '../engines/database.js';
import { ensureCursorsQuery } from '../log/cursors.js';
import { BOX_COLUMNS } from '../state/boxes.js';
import {
  boxOnConflict,
  DELIVERY_COLUMNS,
  boxParams,
  deliveryParams,
  type DeliveryWriter,
  type NewDelivery,
  type RecordResult,
} from './delivery-sql.js';

/** A delivery that waited this long for its commit to start is refused: the store did not take it in time. */
export class CommitTimeoutError extends RelayError {
  readonly code = 'commit_timeout';
  constructor(waitedMs: number) {
    super(`not committed within ${Math.round(waitedMs)} ms`);
  }
}

/** Each column of a batch as one array parameter, in `deliveryParams` then `boxParams` order. */
const COLUMN_TYPES = [
  ...['text', 'text', 'text', 'text', 'bigint', 'integer', 'text', 'text', 'integer', 'text', 'text'],
  ...['text', 'text', 'text', 'text', 'text', 'text', 'text', 'bigint'],
];
const BOX_INPUT = BOX_COLUMNS.map((column) => `b_${column}`);

/**
 * A box row's name after the batch's events of that box (`r`), given the stored row's change time and
 * name (null when there is none), by the rule of one event at a time: the name of the last event
 * that moved the box, or that came while the box had none, and that carried a name.
 */
const nameAfter = (boxId: string, storedChange: string, storedName: string): string => `(SELECT r.b_name FROM box_rows r
      WHERE r.b_id = ${boxId} AND r.b_name IS NOT NULL
        AND ((r.b_state IS NOT NULL AND r.b_state_changed_at >= COALESCE(GREATEST(${storedChange}, r.earlier_change), r.b_state_changed_at))
          OR (${storedName} IS NULL AND r.earlier_names = 0))
      ORDER BY r.n DESC LIMIT 1)`;

/**
 * A batch of deliveries (numbered in the log after commit, by the sequencer) and their boxes in one
 * statement, so one round trip and one commit. Each is given its place in arrival order, then rows
 * are locked in id order (deliveries, then, past the sort, boxes), so two replicas' batches never
 * wait on each other in a cycle. A box takes its rows from the deliveries inserted, so a duplicate
 * writes nothing else, and gets one row: the state of the newest change (the later on a tie), the
 * latest times, and the name one event at a time would leave, whatever the stored row holds. The
 * final SELECT sees the table as the statement started: a duplicate's first copy. Prepared once per
 * connection (by name): one text whatever the batch's size, as each column is one array.
 */
const RECORD_BATCH = `WITH input AS (
    SELECT * FROM unnest(${COLUMN_TYPES.map((type, i) => `$${i + 1}::${type}[]`).join(', ')}) WITH ORDINALITY
      AS i(${DELIVERY_COLUMNS}, ${BOX_INPUT.join(', ')}, n)
  ), arrived AS (
    SELECT input.*, nextval('deliveries_arrival') AS arrival FROM input ORDER BY n
  ), delivered AS (
    INSERT INTO deliveries (${DELIVERY_COLUMNS}, arrival)
    SELECT ${DELIVERY_COLUMNS}, arrival FROM arrived ORDER BY id
    ON CONFLICT (id) DO NOTHING RETURNING id
  ), box_rows AS (
    SELECT input.*,
      max(b_state_changed_at) FILTER (WHERE b_state IS NOT NULL) OVER earlier AS earlier_change,
      count(b_name) OVER earlier AS earlier_names
    FROM input JOIN delivered USING (id) WHERE b_id IS NOT NULL
    WINDOW earlier AS (PARTITION BY b_id ORDER BY n ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
  ), boxed AS (
    INSERT INTO boxes (${BOX_COLUMNS.join(', ')})
    SELECT DISTINCT ON (b_id) b_id, ${nameAfter('box.b_id', 'NULL::text', 'NULL::text')},
      b_state, b_previous_state, b_state_changed_at, b_last_event_id, max(b_hydrated_at) OVER same_box, max(b_last_seen_at) OVER same_box
    FROM box_rows box WINDOW same_box AS (PARTITION BY b_id)
    ORDER BY b_id, b_state IS NOT NULL DESC, b_state_changed_at DESC, n DESC
    ${boxOnConflict(`COALESCE(${nameAfter('boxes.id', 'boxes.state_changed_at', 'boxes.name')}, boxes.name)`)}
  )
  SELECT i.id, d.id IS NOT NULL AS inserted, s.payload AS stored
  FROM input i LEFT JOIN delivered d ON d.id = i.id LEFT JOIN deliveries s ON d.id IS NULL AND s.id = i.id`;

const SELECT_PAYLOADS = 'SELECT id, payload FROM deliveries WHERE id = ANY($1::text[])';

/**
 * A statement carries at most this many deliveries and this many bytes of bodies (a larger one
 * alone): each stays short, and a burst is several statements, one after another.
 */
const BATCH_ROWS = 1000;
const BATCH_BYTES = 4 * 1024 * 1024;

const NO_BOX = BOX_COLUMNS.map(() => null);

/** SQLSTATE classes 22 (data exception) and 23 (integrity constraint violation): the values, not the server, are at fault. */
function refusedValue(error: unknown): boolean {
  return error instanceof pg.DatabaseError && /^2[23]/.test(error.code ?? '');
}

export interface PostgresWriterOptions {
  database: Extract<Database, { dialect: 'postgres' }>;
  /** The writer's own connection (by default `connectOwn('writer')`): the statements run one at a time. */
  connect?: () => Promise<pg.PoolClient>;
  /** After a commit that stored at least one delivery. */
  onCommit?: () => void;
  /** A failure that answered no delivery with an error: reading another replica's copy after the commit. */
  onFailure?: (error: unknown) => void;
  /** A delivery whose statement has not started within this many ms of its arrival is refused (unset: no bound). */
  commitWithinMs?: number;
}

/**
 * Group commit (`groupCommit`): the deliveries that arrive while a statement runs are the next
 * statement, so a burst costs a few round trips and waits in memory, never on a connection pool, and
 * a `503` means the store did not commit in time. The queue holds what the HTTP server has already
 * read (its own limits bound the requests under way), and whatever waited past `commitWithinMs`
 * leaves it refused. Each caller is answered once its statement committed. A box's events in one
 * statement leave its row as they would one at a time, in the order they came. A concurrent insert
 * of the same id by another replica waits on the primary key and then sees the conflict, so each id
 * is stored and fanned out once.
 */
export function createPostgresDeliveryWriter({
  database,
  connect = () => database.connectOwn('writer'),
  onCommit = () => {},
  onFailure = () => {},
  commitWithinMs = Infinity,
}: PostgresWriterOptions): DeliveryWriter {
  const query = async <R extends pg.QueryResultRow>(config: pg.QueryConfig): Promise<R[]> => {
    const client = await connect();
    try {
      return (await client.query<R>(config)).rows;
    } finally {
      client.release();
    }
  };

  /** Sinks whose cursors exist (made here, or found made). */
  const withCursors = new Set<string>();
  /**
   * A sink routed to for the first time gets its cursors at the head first: these deliveries are
   * after it. On the writer's own connection, as the statement: never refused by a busy pool.
   */
  const ensureCursors = async (sinks: string[]): Promise<void> => {
    for (const sink of new Set(sinks)) {
      if (withCursors.has(sink)) continue;
      const { sql, parameters } = ensureCursorsQuery(database.kysely, database, sink, Date.now()).compile();
      await query({ text: sql, values: [...parameters] });
      withCursors.add(sink);
    }
  };

  /**
   * Writes one row per delivery; answers the ids stored now and, by id, the payload kept (this row's
   * when it was stored now) where it is known.
   */
  const writeRows = async (rows: NewDelivery[]): Promise<{ inserted: Set<string>; kept: Map<string, string> }> => {
    await ensureCursors(rows.flatMap((delivery) => delivery.sinks));
    const columns: unknown[][] = COLUMN_TYPES.map(() => []);
    for (const delivery of rows) {
      [...deliveryParams(delivery), ...(boxParams(delivery) ?? NO_BOX)].forEach((value, i) => columns[i]?.push(value));
    }
    const written = await query<{ id: string; inserted: boolean; stored: string | null }>({ name: 'boxrelay_record_deliveries', text: RECORD_BATCH, values: columns });
    const inserted = new Set(written.filter((row) => row.inserted).map((row) => row.id));
    if (inserted.size > 0) onCommit();
    const kept = new Map<string, string>();
    for (const delivery of rows) if (inserted.has(delivery.event.id)) kept.set(delivery.event.id, delivery.event.payload);
    for (const row of written) if (row.stored !== null) kept.set(row.id, row.stored);
    // Null: the first copy was committed by another replica while this statement waited on it, so
    // its snapshot does not hold it; a new statement does. Committed already: a failure here is no
    // delivery's failure (contract section 2: the 200 follows the commit), it only leaves the bodies uncompared.
    const unseen = written.filter((row) => !row.inserted && row.stored === null).map((row) => row.id);
    if (unseen.length > 0) {
      try {
        for (const { id, payload } of await query<{ id: string; payload: string }>({ text: SELECT_PAYLOADS, values: [unseen] })) kept.set(id, payload);
      } catch (error) {
        onFailure(error);
      }
    }
    return { inserted, kept };
  };

  /**
   * One row per id (its first delivery's), the batch's later copies of an id answered from that
   * row's outcome; each delivery's outcome, in the batch's order. A copy whose stored body could not
   * be read is a duplicate all the same, its body taken as the same.
   */
  const commit = async (batch: NewDelivery[]): Promise<Outcome<RecordResult>[]> => {
    const first = new Map<string, number>();
    batch.forEach((delivery, i) => {
      if (!first.has(delivery.event.id)) first.set(delivery.event.id, i);
    });
    let written: Awaited<ReturnType<typeof writeRows>>;
    try {
      written = await writeRows([...first.values()].map((i) => batch[i]!));
    } catch (error) {
      if (refusedValue(error) && first.size > 1) return bisect(batch, [...first.keys()]);
      throw new StorageUnavailableError({ cause: error });
    }
    const { inserted, kept } = written;
    return batch.map(({ event: { id, payload } }, i) => ({
      value: inserted.has(id) && first.get(id) === i ? { duplicate: false, payloadDiffers: false } : { duplicate: true, payloadDiffers: (kept.get(id) ?? payload) !== payload },
    }));
  };

  /**
   * The server refused a value of the batch (a data or constraint error), which may be one
   * delivery's: each half of its ids is committed apart, and a half refused is halved again, so one
   * bad value costs about two statements a halving and everything else is stored.
   */
  const bisect = async (batch: NewDelivery[], ids: string[]): Promise<Outcome<RecordResult>[]> => {
    const half = new Set(ids.slice(0, Math.ceil(ids.length / 2)));
    const outcomes: Outcome<RecordResult>[] = [];
    for (const inHalf of [true, false]) {
      const part = batch.flatMap((delivery, i) => (half.has(delivery.event.id) === inHalf ? [i] : []));
      const answered = await commit(part.map((i) => batch[i]!)).catch((error: unknown) => part.map(() => ({ error })));
      part.forEach((at, k) => (outcomes[at] = answered[k]!));
    }
    return outcomes;
  };

  const deliveries = groupCommit<NewDelivery, RecordResult>({
    commit,
    maxItems: BATCH_ROWS,
    maxBytes: BATCH_BYTES,
    bytesOf: (delivery) => delivery.event.payload.length,
    maxWaitMs: commitWithinMs,
    tooOld: (waitedMs) => new StorageUnavailableError({ cause: new CommitTimeoutError(waitedMs) }),
  });
  return { record: (delivery) => deliveries.add(delivery) };
}
