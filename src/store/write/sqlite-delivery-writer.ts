import { StorageUnavailableError } from '../../errors.js';
import type { Database } from '../engines/database.js';
import {
  INSERT_LOGGED_DELIVERY,
  SELECT_PAYLOAD,
  UPSERT_BOX,
  boxParams,
  deliveryParams,
  type DeliveryWriter,
  type NewDelivery,
  type RecordResult,
} from './delivery-sql.js';
import { ensureCursorsQuery } from '../log/cursors.js';

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
export function createSqliteDeliveryWriter(database: Extract<Database, { dialect: 'sqlite' }>, onCommit: () => void = () => {}): DeliveryWriter {
  const { sqlite } = database;
  /**
   * Sinks known to have their log cursors: one routed to for the first time gets them, at the head,
   * in the same transaction; known only once that commits (a rolled-back batch made none).
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
  const writeBatch = sqlite.transaction((batch: Pending[]) => batch.map((p) => writeOne(p.delivery)));

  let queue: Pending[] = [];
  const flush = (): void => {
    const batch = queue;
    queue = [];
    let results: RecordResult[];
    cursorsMade = [];
    try {
      results = writeBatch.immediate(batch);
      for (const sink of cursorsMade) withCursors.add(sink);
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
