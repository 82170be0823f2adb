import type pg from 'pg';
import { StorageUnavailableError } from '../../errors.js';
import { BOX_COLUMNS } from '../state/boxes.js';
import {
  BOX_ON_CONFLICT,
  INSERT_DELIVERY,
  SELECT_PAYLOAD,
  boxParams,
  deliveryParams,
  toPostgresPlaceholders,
  type DeliveryWriter,
} from './delivery-sql.js';

/**
 * A delivery (numbered in the log after commit, by the sequencer) and its box in one statement, so
 * one round trip and one commit. The box insert takes its row from the delivery's insert, so a
 * duplicate (no row inserted) writes nothing else. The final SELECT sees the table as the statement
 * started: the first copy's payload when this one is a duplicate. Prepared once per connection (by
 * name): parsing and planning it each time cost the server more than running it.
 */
const RECORD = `WITH delivered AS (
    ${toPostgresPlaceholders(INSERT_DELIVERY)} RETURNING id
  ), boxed AS (
    INSERT INTO boxes (${BOX_COLUMNS.join(', ')})
    SELECT $12::text, $13::text, $14::text, $15::text, $16::text, $17::text, $18::text, $19::bigint FROM delivered WHERE $12::text IS NOT NULL
    ${BOX_ON_CONFLICT}
  )
  SELECT (SELECT count(*) FROM delivered)::int AS inserted, (SELECT payload FROM deliveries WHERE id = $1) AS stored`;

const NO_BOX = BOX_COLUMNS.map(() => null);
const selectPayload = toPostgresPlaceholders(SELECT_PAYLOAD);

/**
 * Over the pool, one statement per delivery (atomic by itself). A concurrent insert of the same id by
 * another replica waits on the primary key and then sees the conflict, so each id is stored and
 * fanned out once.
 */
export function createPostgresDeliveryWriter(
  connect: () => Promise<pg.PoolClient>,
  ensureCursors: (sinks: string[]) => Promise<void>,
  onCommit: () => void = () => {},
): DeliveryWriter {
  const query = async <R extends pg.QueryResultRow>(config: pg.QueryConfig): Promise<R | undefined> => {
    const client = await connect();
    try {
      return (await client.query<R>(config)).rows[0];
    } finally {
      client.release();
    }
  };
  return {
    async record(delivery) {
      try {
        const { event } = delivery;
        // A sink routed to for the first time gets its cursors at the head first: this delivery is after it.
        await ensureCursors(delivery.sinks);
        const params = [...deliveryParams(delivery), ...(boxParams(delivery) ?? NO_BOX)];
        const result = await query<{ inserted: number; stored: string | null }>({ name: 'boxrelay_record_delivery', text: RECORD, values: params });
        if (result?.inserted === 1) {
          onCommit();
          return { duplicate: false, payloadDiffers: false };
        }
        // Null: the first copy was committed by another replica while this statement waited on it, so
        // its snapshot does not hold it; a new statement does.
        const stored = result?.stored ?? (await query<{ payload: string }>({ text: selectPayload, values: [event.id] }))?.payload;
        return { duplicate: true, payloadDiffers: stored !== event.payload };
      } catch (error) {
        throw new StorageUnavailableError({ cause: error });
      }
    },
  };
}
