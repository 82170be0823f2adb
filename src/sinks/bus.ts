import type { ArchiveLedger } from '../store/archive/ledger.js';
import type { Clock } from '../clock.js';
import type { Config } from '../config/schema.js';
import type { BusName } from '../errors.js';
import type { DependencyStatus } from '../dependency-status.js';
import type { CloudEvent } from '../events/cloudevent.js';
import type { Logger } from '../log.js';
import type { Timers } from '../schedule.js';
import { BusDownError, BusNoAnswerError, asSinkFailure, eventJson, type SinkFailure } from './failures.js';
import type { Sink } from './sink.js';

/**
 * A message bus (NATS, RabbitMQ, Redis Streams, MQTT, Kafka): a sink that keeps its own connection, so the
 * dispatcher claims nothing for it while it is down, and reports readiness under its name.
 */
export interface Bus extends Sink {
  /** Connects in the background and reconnects forever; deliveries wait in the outbox meanwhile. */
  start(): void;
  /** The `/readyz` check named after the bus. */
  check(): DependencyStatus;
  onUp(listener: () => void): void;
}

/** Timing tests shorten: how long one publish waits for the broker, and the reconnect delays; `timers` for a bus's own waits (tests fire them by hand). */
export interface BusTuning {
  ackTimeoutMs?: number;
  backoff?: { minMs: number; maxMs: number };
  timers?: Timers;
}

/** What a bus's create function takes: its settings, its URL, the logger and the timing. */
export type BusSinkOptions<S> = { settings: S; url: string; logger: Logger } & BusTuning;

/** The default wait for the broker's answer to one publish, and the reconnect delays. */
export const DEFAULT_ACK_TIMEOUT_MS = 5000;
export const DEFAULT_BACKOFF = { minMs: 250, maxMs: 5000 };

/** One entry of BUSES: a bus is on when its URL is set. */
export interface BusDefinition {
  /** The sink name, its `/admin/sinks` kind and its `/readyz` check. */
  readonly name: BusName;
  url(config: Config): string | undefined;
  create(deps: { config: Config; url: string; logger: Logger; clock: Clock; tuning?: BusTuning | undefined; archive: ArchiveLedger }): Bus;
}

/** Buses other than NATS follow the hooks' retry schedule and pause rule (contract section 12). */
export const BUS_MAX_ATTEMPTS = 8;
export const BUS_PAUSE_AFTER_MS = 600_000;

/** What `link` is told by a driver's connection: up, down (a reason when known), or refusing what the relay needs. */
export interface BusLink {
  up(): void;
  down(reason?: string): void;
  refused(reason: string): void;
}

/**
 * The part of a bus that differs from broker to broker; `busSink` makes it a Bus. Another bus is one
 * such driver and its definition.
 */
export interface BusDriver<M> {
  readonly name: BusName;
  readonly ordering: 'none' | 'per-box';
  /** Publishes awaiting the broker at once. */
  readonly concurrency: number;
  readonly ackTimeoutMs: number;
  /** The message for an event (the CloudEvent JSON as `body`); throws a PermanentFailure for one the broker can never take. */
  message(event: CloudEvent, body: string, traceparent: string | undefined): M;
  /** `publish <routing key or topic>`. */
  spanName(event: CloudEvent): string;
  /** Connects and keeps connecting, telling `link` each change. */
  connect(link: BusLink): void;
  /** Resolves once the broker has the message (confirm, reply, PUBACK). */
  publish(message: M): Promise<void>;
  /** A publish's failure: transient (retry) or permanent for that event (dead letter). */
  classify(error: unknown, message: M): SinkFailure;
  /** Waits (bounded) for what is in flight, then closes. */
  close(): Promise<void>;
}

/** A Bus around a driver: the connection state, readiness, timeouts and failure classes are the same for each. */
export function busSink<M>(driver: BusDriver<M>): Bus {
  let status: DependencyStatus = { state: 'down' };
  const listeners = new Set<() => void>();
  const link: BusLink = {
    up() {
      status = { state: 'ok' };
      for (const listener of listeners) listener();
    },
    down: (reason) => void (status = reason === undefined ? { state: 'down' } : { state: 'down', error: reason }),
    refused: (reason) => void (status = { state: 'error', error: reason }),
  };
  return {
    name: driver.name,
    concurrency: driver.concurrency,
    maxAttempts: BUS_MAX_ATTEMPTS,
    pauseAfterMs: BUS_PAUSE_AFTER_MS,
    attemptTimeoutMs: driver.ackTimeoutMs,
    ordering: driver.ordering,
    spanKind: 'producer',
    spanName: driver.spanName,
    start: () => driver.connect(link),
    check: () => status,
    up: () => status.state === 'ok',
    onUp: (listener) => void listeners.add(listener),
    async deliver(event, _signal, trace) {
      if (status.state !== 'ok') throw new BusDownError(driver.name);
      const message = driver.message(event, eventJson(event), trace?.traceparent);
      // The last word before the publish (a lease run out since the admission, a pause told meanwhile).
      trace?.starting?.();
      const published = driver.publish(message).catch((error: unknown) => Promise.reject(driver.classify(error, message)));
      await answeredWithin(published, driver.ackTimeoutMs, () => new BusNoAnswerError(driver.name, driver.ackTimeoutMs)).catch((error: unknown) =>
        Promise.reject(asSinkFailure(error)),
      );
    },
    async close() {
      status = { state: 'down' };
      await driver.close();
    },
  };
}

/**
 * The broker's answer, or `timedOut()` after `ms`. Not p-timeout here: it builds a TimeoutError with
 * its stack at every call, used or not, a cost paid on every event of a drain (docs/performance.md).
 */
function answeredWithin<T>(answer: Promise<T>, ms: number, timedOut: () => Error): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_resolve, reject) => {
    timer = setTimeout(() => reject(timedOut()), ms);
  });
  return Promise.race([answer, late]).finally(() => clearTimeout(timer));
}
