import { groupCommit } from '../group-commit.js';
import type { Logger } from '../log.js';
import type { SinkFailure } from '../sinks/failures.js';
import type { Exchange } from '../sinks/sink.js';
import type { AttemptLog } from '../store/attempts/record-attempts.js';
import type { NewAttempt } from '../store/attempts/attempt-rows.js';
import type { AttemptsMode } from '../store/attempts/sink-health.js';

/** One attempt as it ended on a sink. */
export interface EndedAttempt {
  sink: string;
  eventId: string;
  /** Epoch ms when it started. */
  at: number;
  durationMs: number;
  /** A hook's request and answer. */
  exchange: Exchange | undefined;
  failure: SinkFailure | undefined;
  /** The failure ends the event's attempts on the sink: a dead letter. */
  final: boolean;
}

/** Writes attempts down as `BOXRELAY_ATTEMPTS` says (contract section 16). */
export interface AttemptRecorder {
  /** A failure kept resolves once it is stored (its outcome counts only then); any other attempt is queued for the next batch. */
  record(attempt: EndedAttempt): Promise<void> | undefined;
  /** Writes the queued attempts. */
  flush(): Promise<void>;
}

function toNewAttempt({ sink, eventId, at, durationMs, exchange, failure, final }: EndedAttempt): NewAttempt {
  return {
    eventId,
    sink,
    at,
    durationMs,
    outcome: failure === undefined ? 'delivered' : final ? 'dead_lettered' : 'retried',
    status: exchange?.status ?? null,
    error: failure ? { code: failure.code, message: failure.message } : null,
    // A bus answers with its ack or its refusal; a timeout or a lost connection is no answer.
    answered: exchange ? exchange.response !== null : failure === undefined || !failure.retryable,
    request: exchange?.request ?? null,
    response: exchange?.response ?? null,
  };
}

/** How long an attempt waits for others to be written with it: one transaction for many, off the attempts' path. */
const BATCH_MS = 100;
const BATCH_ROWS = 500;

/**
 * Every attempt is counted in the per-minute sums behind health, whatever the mode; the mode says
 * which are also kept one by one. A failure kept is written at once, durably; the rest are written
 * in batches (`groupCommit`, gathering for BATCH_MS): successes kept, or attempts only counted.
 */
export function createAttemptRecorder({ log, mode, logger }: { log: AttemptLog; mode: AttemptsMode; logger: Logger }): AttemptRecorder {
  const batches = groupCommit<NewAttempt, void>({
    gatherMs: BATCH_MS,
    maxItems: BATCH_ROWS,
    async commit(batch) {
      try {
        await (mode === 'all' ? log.recordDelivered(batch) : log.countAttempts(batch));
      } catch (error) {
        logger.error({ err: error, attempts: batch.length }, 'could not record a batch of attempts; their deliveries stand');
      }
      // Nobody waits on these: a failure is logged here, once a batch.
      return batch.map(() => ({ value: undefined }));
    },
  });
  return {
    record(attempt) {
      if (attempt.failure && mode !== 'off') return log.recordFailed([toNewAttempt(attempt)]);
      void batches.add(toNewAttempt(attempt));
      return undefined;
    },
    flush: () => batches.flush(),
  };
}
