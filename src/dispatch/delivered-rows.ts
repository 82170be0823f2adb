import { groupCommit } from '../group-commit.js';
import type { Logger } from '../log.js';
import type { Delivered } from '../store/exceptions/rows.js';

/** Delivered outbox rows, recorded in batches: one statement for the acks that arrive while the last is written. */
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
  const rows = groupCommit<Delivered, void>({
    async commit(batch) {
      try {
        const reopened = await markDelivered(batch);
        // No longer held back as recording before they are given back: a claim that finds them sends them.
        batch.forEach((row) => recording.delete(row.id));
        if (reopened.length > 0) await release(reopened);
        // The next event of a box (per-box ordering) becomes claimable only once its predecessor's row is no longer pending.
        recorded();
      } catch (error) {
        log.error({ err: error, rows: batch.length }, 'could not record delivered rows; they will be sent again');
      } finally {
        batch.forEach((row) => recording.delete(row.id));
      }
      // Nobody waits on a mark: a failure is logged here, once a batch.
      return batch.map(() => ({ value: undefined }));
    },
  });
  return {
    mark(row) {
      recording.add(row.id);
      void rows.add(row);
    },
    recording: (id) => recording.has(id),
    flush: () => rows.flush(),
  };
}
