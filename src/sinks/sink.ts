import type { HeldAs } from '../store/exceptions/claims.js';
import type { CloudEvent } from '../events/cloudevent.js';
import type { ExchangeRequest, ExchangeResponse } from '../exchange.js';

/** One attempt's request and answer (`response` null when none came), as an operator reads them (contract section 16). */
export interface Exchange {
  request: ExchangeRequest;
  /** The answer's HTTP status, null with the response when none came. */
  status: number | null;
  response: ExchangeResponse | null;
}

/** What an attempt knows beyond its event. */
export interface AttemptContext {
  /** Tracing on: the attempt span's traceparent, sent with the message or request. */
  traceparent?: string | undefined;
  /**
   * The event comes from an outbox row (a retry, a replay, a resend), not straight from the delivery
   * log: the S3 archive writes such events to objects of their own (contract section 20).
   */
  row?: { id: number; version: number } | undefined;
  /** An event straight from the log: its partition as the lane holds it, which a sink's own bookkeeping is fenced by (the S3 archive's ledger). */
  heldAs?: HeldAs | undefined;
  /**
   * The last word on whether the attempt may start: asked again by a sink that made the attempt wait
   * before its request (the rate gate), as the attempt now starts; its rejection (the sink was paused
   * meanwhile, or its lease lost) passes through unchanged and nothing is sent.
   */
  admit?: (() => Promise<void>) | undefined;
  /**
   * The same, synchronous, asked by a sink immediately before its request leaves (nothing awaited in
   * between): throws when the lease ran out by this process's clock or the sink was paused meanwhile.
   */
  starting?: (() => void) | undefined;
  /**
   * As `starting`, but passing while the relay stops: for work admitted before the stop that a sink
   * completes as it drains (the S3 archive's open object), not for a new attempt.
   */
  holding?: (() => void) | undefined;
}

/** Where fan-out goes: a bus (NATS, RabbitMQ, ...; see bus.ts) or one outgoing HTTP hook. */
export interface Sink {
  /** The bus's name (`nats`, `amqp`, ...) or the hook's name; the outbox rows' `sink`. */
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
   * One attempt: resolves when delivered (a hook with its Exchange; `skipped` when a hook's transform
   * sends nothing for the event, contract section 17, so no request was made), throws a SinkFailure
   * otherwise (a hook's with its Exchange). `context.traceparent` (tracing on) goes with the message or
   * request, so consumers continue the trace.
   */
  deliver(event: CloudEvent, signal: AbortSignal, context?: AttemptContext): Promise<Exchange | void | 'skipped'>;
  /** The span name of an attempt: `publish <subject>` for a bus, the method for a hook. */
  spanName?(event: CloudEvent): string;
  /** The attempt's span kind: `producer` for a bus, `client` (the default) for a request. */
  readonly spanKind?: 'producer' | 'client';
  /** Attempts waiting for their turn under the sink's rate (`maxPerSecond`); absent: no rate. */
  throttled?(): number;
  /** Connected or answering (the `sink_up` gauge). */
  up(): boolean;
  /** The relay stops: what the sink holds back (the S3 archive's open objects) goes out now, not at its age. */
  drain?(): void;
  /**
   * Present on sinks that know their connection state without trying (buses): while up() is false
   * nothing is claimed for them, and the listener runs when they come back.
   */
  onUp?(listener: () => void): void;
  close(): Promise<void>;
}
