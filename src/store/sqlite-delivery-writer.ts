import type BetterSqlite3 from 'better-sqlite3';
import { StorageUnavailableError } from '../errors.js';
import {
  INSERT_DELIVERY,
  INSERT_OUTBOX,
  SELECT_PAYLOAD,
  UPSERT_BOX,
  boxParams,
  deliveryParams,
  outboxParams,
  type DeliveryWriter,
  type NewDelivery,
  type RecordResult,
} from './delivery-sql.js';

interface Pending {
  delivery: NewDelivery;
  resolve(result: RecordResult): void;
  reject(error: Error): void;
}

/**
 * Group commit: deliveries that arrive within one turn of the event loop share one IMMEDIATE
 * transaction and so one fsync, which is what makes synchronous=FULL affordable. Each caller's
 * promise settles only after that commit.
 */
export function createSqliteDeliveryWriter(
  sqlite: BetterSqlite3.Database,
  onCommit: () => void = () => {},
): DeliveryWriter {
  const insertDelivery = sqlite.prepare(INSERT_DELIVERY);
  const insertOutbox = sqlite.prepare(INSERT_OUTBOX);
  const upsertBox = sqlite.prepare(UPSERT_BOX);
  const selectPayload = sqlite.prepare<[string], { payload: string }>(SELECT_PAYLOAD);

  const writeOne = (delivery: NewDelivery): RecordResult => {
    if (insertDelivery.run(...deliveryParams(delivery)).changes === 0) {
      const stored = selectPayload.get(delivery.event.id);
      return { duplicate: true, payloadDiffers: stored?.payload !== delivery.event.payload };
    }
    for (const sink of delivery.sinks) insertOutbox.run(...outboxParams(delivery, sink));
    const box = boxParams(delivery);
    if (box) upsertBox.run(...box);
    return { duplicate: false, payloadDiffers: false };
  };
  const writeBatch = sqlite.transaction((batch: Pending[]) => batch.map((p) => writeOne(p.delivery)));

  let queue: Pending[] = [];
  const flush = (): void => {
    const batch = queue;
    queue = [];
    let results: RecordResult[];
    try {
      results = writeBatch.immediate(batch);
    } catch (error) {
      const failure = new StorageUnavailableError({ cause: error });
      for (const p of batch) p.reject(failure);
      return;
    }
    batch.forEach((p, i) => p.resolve(results[i] as RecordResult));
    if (results.some((r) => !r.duplicate)) onCommit();
  };

  return {
    record(delivery) {
      return new Promise<RecordResult>((resolve, reject) => {
        if (queue.length === 0) setImmediate(flush);
        queue.push({ delivery, resolve, reject });
      });
    },
  };
}
