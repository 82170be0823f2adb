import { CompiledQuery, type Kysely } from 'kysely';
import { StorageUnavailableError } from '../errors.js';
import {
  INSERT_DELIVERY,
  INSERT_OUTBOX,
  SELECT_PAYLOAD,
  UPSERT_BOX,
  boxParams,
  deliveryParams,
  outboxParams,
  toPostgresPlaceholders,
  type DeliveryWriter,
} from './delivery-sql.js';
import type { Schema } from './schema.js';

const [insertDelivery, insertOutbox, upsertBox, selectPayload] = [
  INSERT_DELIVERY,
  INSERT_OUTBOX,
  UPSERT_BOX,
  SELECT_PAYLOAD,
].map(toPostgresPlaceholders) as [string, string, string, string];

/**
 * One transaction per delivery over the pool. A concurrent insert of the same id by another replica
 * waits on the primary key and then sees the conflict, so each id is stored and fanned out once.
 */
export function createPostgresDeliveryWriter(kysely: Kysely<Schema>, onCommit: () => void = () => {}): DeliveryWriter {
  return {
    async record(delivery) {
      try {
        const result = await kysely.transaction().execute(async (tx) => {
          const run = (text: string, params: unknown[]) => tx.executeQuery(CompiledQuery.raw(text, params));
          const inserted = await run(insertDelivery, deliveryParams(delivery));
          if (inserted.numAffectedRows === 0n) {
            const stored = await run(selectPayload, [delivery.event.id]);
            const payload = (stored.rows[0] as { payload?: string } | undefined)?.payload;
            return { duplicate: true, payloadDiffers: payload !== delivery.event.payload };
          }
          for (const sink of delivery.sinks) await run(insertOutbox, outboxParams(delivery, sink));
          const box = boxParams(delivery);
          if (box) await run(upsertBox, box);
          return { duplicate: false, payloadDiffers: false };
        });
        if (!result.duplicate) onCommit();
        return result;
      } catch (error) {
        throw new StorageUnavailableError({ cause: error });
      }
    },
  };
}
