import type { CloudEvent } from '../events/cloudevent.js';

/** Where fan-out goes: the NATS sink or one outgoing HTTP hook. */
export interface Sink {
  /** `nats` or the hook's name; the outbox rows' `sink`. */
  readonly name: string;
  /** Deliveries in flight at once. */
  readonly concurrency: number;
  /** Attempts (in process and scheduled) before the event becomes a dead letter for this sink. */
  readonly maxAttempts: number;
  /** The longest one attempt can take, which bounds how long a claimed row must stay leased. */
  readonly attemptTimeoutMs: number;
  /** `per-box`: one event of a box at a time, in accepted order (default `none`). */
  readonly ordering?: 'none' | 'per-box';
  /** Failing every attempt this long pauses the sink (contract section 5); 0 or absent: never. */
  readonly pauseAfterMs?: number;
  /**
   * One attempt: resolves when delivered, throws a SinkFailure otherwise. `trace.traceparent` (tracing
   * on) goes with the message or request, so consumers continue the trace.
   */
  deliver(event: CloudEvent, signal: AbortSignal, trace?: { traceparent?: string | undefined }): Promise<void>;
  /** The span name of an attempt: `publish <subject>` for NATS, the method for a hook. */
  spanName?(event: CloudEvent): string;
  /** Connected or answering (the `sink_up` gauge). */
  up(): boolean;
  /**
   * Present on sinks that know their connection state without trying (NATS): while up() is false
   * nothing is claimed for them, and the listener runs when they come back.
   */
  onUp?(listener: () => void): void;
  close(): Promise<void>;
}

/**
 * A failed attempt. `code` is stable and short (it lands in `last_error`, logs and tests);
 * `retryable` says whether another attempt may succeed.
 */
export abstract class SinkFailure extends Error {
  abstract readonly retryable: boolean;
  /** A lower bound for the delay before the next attempt (a hook's Retry-After). */
  readonly retryAfterMs: number | undefined;

  constructor(
    readonly code: string,
    message: string,
    options?: ErrorOptions & { retryAfterMs?: number | undefined },
  ) {
    super(message, options);
    this.name = new.target.name;
    this.retryAfterMs = options?.retryAfterMs;
  }

  /** What is kept in `last_error`: the code, then the detail when it adds something. */
  get summary(): string {
    return this.message && this.message !== this.code ? `${this.code}: ${this.message}` : this.code;
  }
}

/** Another attempt may succeed: timeouts, connection errors, 408, 429, 5xx, a missing JetStream ack. */
export class RetryableFailure extends SinkFailure {
  readonly retryable = true;
}

/** Trying again cannot help (a hook's other 4xx): the event becomes a dead letter at once. */
export class PermanentFailure extends SinkFailure {
  readonly retryable = false;
}

/**
 * The event as JSON, or a PermanentFailure: JSON.stringify overflows the stack on data nested some
 * thousands of levels deep (an event stored before the receiver's depth limit), at every attempt.
 */
export function eventJson(event: CloudEvent): string {
  try {
    return JSON.stringify(event);
  } catch {
    throw new PermanentFailure('event_not_serializable', 'the event cannot be serialized as JSON (nested too deeply)');
  }
}

/** Anything a sink threw that is not a SinkFailure is an unexpected library error: retry it. */
export function asSinkFailure(error: unknown): SinkFailure {
  if (error instanceof SinkFailure) return error;
  const message = error instanceof Error ? error.message : String(error);
  return new RetryableFailure('sink_error', message, { cause: error });
}
