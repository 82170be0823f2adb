import type { Logger } from '../log.js';
import type { Delivered } from '../store/exceptions/rows.js';

/** Delivered outbox rows, recorded in batches: one statement for the acks that arrive together. */
export interface DeliveredRows {
  mark(row: Delivered): void;
  /** Delivered here and not yet recorded: a claim that finds the row again must not send it twice. */
  recording(id: number): boolean;
  /** Records what is marked; resolves once every batch so far is written (or failed). */
  flush(): Promise<void>;
}

export interface DeliveredRowsDeps {
  /** Returns the ids of rows reopened since their claim (a resend): not delivered by this attempt. */
  markDelivered(rows: Delivered[]): Promise<number[]>;
  /** Gives rows back, so a claim sends them again. */
  release(ids: number[]): Promise<void>;
  /** After a batch is recorded: the next event of a box (per-box order) may be claimed now. */
  recorded(): void;
  log: Logger;
}

export function createDeliveredRows({ markDelivered, release, recorded, log }: DeliveredRowsDeps): DeliveredRows {
  const recording = new Set<number>();
  let delivered: Delivered[] = [];
  let flushing: Promise<void> = Promise.resolve();
  const flush = (): Promise<void> => {
    const batch = delivered;
    delivered = [];
    if (batch.length === 0) return flushing;
    flushing = flushing
      .then(async () => {
        const reopened = await markDelivered(batch);
        // No longer held back as recording before they are given back: a claim that finds them sends them.
        batch.forEach((row) => recording.delete(row.id));
        if (reopened.length > 0) await release(reopened);
      })
      // The next event of a box (per-box ordering) becomes claimable only once its predecessor's row is no longer pending.
      .then(recorded)
      .catch((error: unknown) => log.error({ err: error, rows: batch.length }, 'could not record delivered rows; they will be sent again'))
      .finally(() => batch.forEach((row) => recording.delete(row.id)));
    return flushing;
  };
  return {
    mark(row) {
      if (delivered.length === 0) setImmediate(flush);
      recording.add(row.id);
      delivered.push(row);
    },
    recording: (id) => recording.has(id),
    flush,
  };
}
