import { RelayError, describeError, type BusName, type SinkFailureCode } from '../errors.js';
import type { CloudEvent } from '../events/cloudevent.js';
import type { Exchange } from './sink.js';

/**
 * Why an attempt on a sink failed: one class per failure, each with a stable `code` (it lands in
 * `last_error`, logs and tests), retryable or permanent. Never an HTTP answer (not an HttpRefusal).
 */
export abstract class SinkFailure extends RelayError {
  abstract readonly retryable: boolean;
  /** A lower bound for the delay before the next attempt (a hook's Retry-After). */
  readonly retryAfterMs: number | undefined;
  /** A hook's request and what came back, kept with the attempt. */
  exchange: Exchange | undefined;

  constructor(
    readonly code: SinkFailureCode,
    message: string,
    options?: ErrorOptions & { retryAfterMs?: number | undefined },
  ) {
    super(message, options);
    this.retryAfterMs = options?.retryAfterMs;
  }

  /** What is kept in `last_error`: the code, then the detail when it adds something. */
  get summary(): string {
    return this.message && this.message !== this.code ? `${this.code}: ${this.message}` : this.code;
  }
}

/** Another attempt may succeed: timeouts, connection errors, 408, 429, 5xx, a missing JetStream ack. */
export abstract class RetryableFailure extends SinkFailure {
  readonly retryable = true;
}

/** Trying again cannot help (a hook's other 4xx): the event becomes a dead letter at once. */
export abstract class PermanentFailure extends SinkFailure {
  readonly retryable = false;
}

/**
 * The event cannot be sent to this sink whatever the sink does (its transform fails on it): a dead
 * letter at once, and no sign of the sink's health (it neither pauses nor resumes the sink).
 */
export abstract class EventFailure extends PermanentFailure {}

// Every sink

/** JSON.stringify overflows on data nested thousands of levels deep: no attempt can send it. */
export class EventNotSerializableError extends PermanentFailure {
  constructor() {
    super('event_not_serializable', 'the event cannot be serialized as JSON (nested too deeply)');
  }
}

/** A library error that is not one of the failures below: retried. */
export class UnexpectedSinkError extends RetryableFailure {
  constructor(message: string, options?: ErrorOptions) {
    super('sink_error', message, options);
  }
}

/** The relay is stopping: the attempt was cut (not counted against the event). */
export class SinkStoppingError extends RetryableFailure {
  constructor(options?: ErrorOptions) {
    super('aborted', 'the relay is stopping', options);
  }
}

// HTTP hooks

/** The request cannot be built (a header value that is not valid HTTP); the value is not shown. */
export class HookRequestInvalidError extends PermanentFailure {
  constructor() {
    super('invalid_request', 'the request cannot be built: a header value is not valid HTTP (not shown)');
  }
}

export class HookTimeoutError extends RetryableFailure {
  constructor(timeoutMs: number, options?: ErrorOptions) {
    super('timeout', `no answer within ${timeoutMs} ms`, options);
  }
}

/** No answer at all: only the system error code is kept (fetch's own messages may quote headers). */
export class HookConnectionError extends RetryableFailure {
  constructor(systemCode: string | undefined) {
    super('connection_error', systemCode ?? 'the request failed without an answer');
  }
}

/** 408, 429 or 5xx: tried again, no sooner than its Retry-After. */
export class HookUnavailableError extends RetryableFailure {
  constructor(status: number, retryAfterMs: number | undefined) {
    super(`http_${status}`, `hook answered ${status}`, { retryAfterMs });
  }
}

/** Any other non-2xx answer: the hook refuses the event. */
export class HookRejectedError extends PermanentFailure {
  constructor(status: number) {
    super(`http_${status}`, `hook answered ${status}`);
  }
}

// Every bus (codes start with the bus's name: `amqp_down`, `redis_timeout`, ...)

/** Not connected: the lane claims nothing for a bus that is down, so this is a publish that raced a disconnect. */
export class BusDownError extends RetryableFailure {
  constructor(bus: BusName) {
    super(`${bus}_down`, `not connected to ${bus}`);
  }
}

/**
 * The S3 archive's ledger refused to record an object: a partition of its events was taken by
 * another replica since they were read (that one archives them). Tried again, the attempt is
 * refused at the gate once this replica renewed its leases.
 */
export class ArchiveFencedError extends RetryableFailure {
  constructor() {
    super('s3_fenced', 'another replica took the events of this archive object; it archives them');
  }
}

/** The broker did not confirm within the attempt's time; the message may still arrive (at least once). */
export class BusNoAnswerError extends RetryableFailure {
  constructor(bus: BusName, timeoutMs: number) {
    super(`${bus}_timeout`, `no answer from ${bus} within ${timeoutMs} ms`);
  }
}

/** The broker failed the publish in a way another attempt may not (a channel closed, out of memory, a reconnect). */
export class BusUnavailableError extends RetryableFailure {
  constructor(bus: BusName, reason: string, message: string, options?: ErrorOptions) {
    super(`${bus}_${reason}`, message, options);
  }
}

/** The broker refuses this message for good (access refused on its routing key, too large, no such exchange). */
export class BusRefusedError extends PermanentFailure {
  constructor(bus: BusName, reason: string, message: string, options?: ErrorOptions) {
    super(`${bus}_${reason}`, message, options);
  }
}

// NATS

/** The JetStream stream is being set up, or its set-up was refused (the reason). */
export class NatsStreamUnavailableError extends RetryableFailure {
  constructor(reason: string) {
    super('nats_stream_unavailable', reason);
  }
}

export class NatsStreamMissingError extends RetryableFailure {
  constructor(subject: string, options?: ErrorOptions) {
    super('nats_stream_missing', `no JetStream stream captures ${subject}`, options);
  }
}

export class NatsNoAckError extends RetryableFailure {
  constructor(message: string, options?: ErrorOptions) {
    super('nats_no_ack', message, options);
  }
}

/** Core mode: the server's PONG did not come back in time. */
export class NatsFlushTimeoutError extends RetryableFailure {
  constructor(timeoutMs: number, options?: ErrorOptions) {
    super('nats_flush_timeout', `no flush from NATS within ${timeoutMs} ms`, options);
  }
}

export class NatsPermissionDeniedError extends PermanentFailure {
  constructor(subject: string) {
    super('nats_permission_denied', `NATS refused publishing to ${subject} (permissions violation)`);
  }
}

/** Over the server's control line: publishing it would drop the connection. */
export class NatsSubjectTooLongError extends PermanentFailure {
  constructor(bytes: number, maxBytes: number) {
    super('nats_subject_too_long', `subject of ${bytes} bytes exceeds NATS's limit of ${maxBytes} bytes`);
  }
}

export class NatsInvalidMessageError extends PermanentFailure {
  constructor() {
    super('nats_invalid_message', 'the event id cannot be a NATS header value');
  }
}

export class NatsPayloadTooLargeError extends PermanentFailure {
  constructor(bytes: number, maxPayload: number) {
    super('nats_payload_too_large', `event of ${bytes} bytes (with headers) exceeds the server's max_payload of ${maxPayload} bytes`);
  }
}

/**
 * Each event's JSON, made once for every sink it goes to (the dispatcher shares the event between
 * them): a memo of `stringify`, keyed weakly by the event, so no state any caller could depend on.
 * JSON.stringify overflows the stack on data nested some thousands of levels deep (an event stored
 * before the receiver's depth limit), at every attempt: that is a PermanentFailure.
 */
export function jsonOnceEach(stringify: (event: CloudEvent) => string = JSON.stringify): (event: CloudEvent) => string {
  const jsonOfEvent = new WeakMap<CloudEvent, string>();
  return (event) => {
    let json = jsonOfEvent.get(event);
    if (json !== undefined) return json;
    try {
      json = stringify(event);
    } catch {
      throw new EventNotSerializableError();
    }
    jsonOfEvent.set(event, json);
    return json;
  };
}

/** The event as JSON, or an EventNotSerializableError: shared by every sink. */
export const eventJson = jsonOnceEach();

/** Anything a sink threw that is not a SinkFailure is an unexpected library error: retry it. */
export function asSinkFailure(error: unknown): SinkFailure {
  if (error instanceof SinkFailure) return error;
  return new UnexpectedSinkError(describeError(error), { cause: error });
}
