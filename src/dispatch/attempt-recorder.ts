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
  /** A failure resolves once it is stored (its outcome counts only then); a success is queued for the next batch. */
  record(attempt: EndedAttempt): Promise<void> | undefined;
  /** Writes the queued successes. */
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

/** How long a success waits for others to be written with it: one transaction for many, off the attempts' path. */
const BATCH_MS = 100;
const BATCH_ROWS = 500;

/** None when attempts are off. */
export function createAttemptRecorder({ log, mode, logger }: { log: AttemptLog; mode: AttemptsMode; logger: Logger }): AttemptRecorder | undefined {
  if (mode === 'off') return undefined;
  let queued: NewAttempt[] = [];
  let writing: Promise<void> = Promise.resolve();
  let timer: NodeJS.Timeout | undefined;
  const flush = (): Promise<void> => {
    clearTimeout(timer);
    timer = undefined;
    const batch = queued;
    queued = [];
    if (batch.length === 0) return writing;
    writing = writing
      .then(() => log.recordDelivered(batch))
      .catch((error: unknown) => logger.error({ err: error, attempts: batch.length }, 'could not record delivered attempts; their deliveries stand'));
    return writing;
  };
  return {
    record(attempt) {
      if (attempt.failure) return log.recordFailed([toNewAttempt(attempt)]);
      if (mode === 'failed') return undefined;
      queued.push(toNewAttempt(attempt));
      if (queued.length >= BATCH_ROWS) void flush();
      else timer ??= setTimeout(() => void flush(), BATCH_MS).unref();
      return undefined;
    },
    flush,
  };
}
