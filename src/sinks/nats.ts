import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  JetStreamApiCodes,
  JetStreamApiError,
  jetstream,
  jetstreamManager,
  type JetStreamClient,
  type JetStreamManager,
} from '@nats-io/jetstream';
import {
  RequestError,
  connect,
  credsAuthenticator,
  headers,
  nanos,
  type NatsConnection,
  type NodeConnectionOptions,
} from '@nats-io/transport-node';
import type { Config } from '../config/schema.js';
import type { CloudEvent } from '../events/cloudevent.js';
import type { DependencyStatus } from '../http/readiness.js';
import type { Logger } from '../log.js';
import { DAY_MS } from '../store/prune.js';
import { subjectCovers, subjectFor } from './nats-subject.js';
import { NATS_SINK } from './route.js';
import { PermanentFailure, RetryableFailure, type Sink } from './sink.js';

export type NatsSettings = Pick<
  Config,
  | 'natsMode'
  | 'natsSubjectPrefix'
  | 'natsStream'
  | 'natsDuplicateWindow'
  | 'natsMaxAge'
  | 'natsOrdering'
  | 'retentionDays'
  | 'natsCredsFile'
  | 'natsToken'
  | 'natsUser'
  | 'natsPassword'
  | 'natsTlsCaFile'
> & { natsUrl: string };

export interface NatsSinkOptions {
  settings: NatsSettings;
  logger: Logger;
  /** How long a publish waits for the JetStream ack (or a core flush). */
  ackTimeoutMs?: number;
  /** Publishes in flight at once: acks are awaited side by side, not one round trip each. */
  concurrency?: number;
  /** (Re)connect delays grow from min to max; a refused stream set-up is retried after max. */
  backoff?: { minMs: number; maxMs: number };
}

export interface NatsSink extends Sink {
  /** Connects in the background; deliveries wait in the outbox until the sink is up. */
  start(): void;
  /** `/readyz` detail: down while disconnected or while the stream is set up (again), error (with the reason) when it is refused. */
  check(): DependencyStatus;
}

/**
 * The NATS sink. JetStream mode publishes with `Nats-Msg-Id` = event id and waits for the ack, after
 * making sure a stream captures `<prefix>.>`; core mode publishes and flushes. The connection is
 * retried forever, so an outage only parks the work in the outbox.
 */
export function createNatsSink({ settings, logger, ackTimeoutMs = 5000, concurrency = 256, backoff = { minMs: 250, maxMs: 5000 } }: NatsSinkOptions): NatsSink {
  const log = logger.child({ sink: NATS_SINK });
  const prefix = settings.natsSubjectPrefix;
  const captured = `${prefix}.>`;
  const jetStreamMode = settings.natsMode === 'jetstream';
  const closing = new AbortController();
  const listeners = new Set<() => void>();

  let nc: NatsConnection | undefined;
  let js: JetStreamClient | undefined;
  let connected = false;
  let stream: { state: 'pending' | 'ready' } | { state: 'refused'; error: string } = { state: 'pending' };
  /** Counts the set-ups that ended ready, so a publish sent before the latest one cannot undo it. */
  let streamGeneration = 0;
  /** When a lost stream was last set up again: once per `backoff.maxMs` at most. */
  let lastRecoveryAt = Number.NEGATIVE_INFINITY;
  let failures = 0;
  const nextDelay = () => Math.min(backoff.maxMs, backoff.minMs * 2 ** failures++) * (0.75 + Math.random() / 2);

  const isUp = () => connected && (!jetStreamMode || stream.state === 'ready');
  const notifyIfUp = () => {
    if (isUp()) for (const listener of listeners) listener();
  };

  const options: NodeConnectionOptions = {
    servers: settings.natsUrl.split(',').map((s) => s.trim()),
    name: 'boxrelay',
    maxReconnectAttempts: -1,
    reconnectDelayHandler: nextDelay,
    timeout: ackTimeoutMs,
    pingInterval: 10_000,
    // Otherwise every publish captures two stack traces up front (for a timeout's message), a
    // tenth of the relay's CPU at a few thousand events a second; failures are reported by reason.
    noAsyncTraces: true,
    ...(settings.natsCredsFile ? { authenticator: credsAuthenticator(() => readFileSync(settings.natsCredsFile as string)) } : {}),
    ...(settings.natsToken ? { token: settings.natsToken } : {}),
    ...(settings.natsUser ? { user: settings.natsUser, pass: settings.natsPassword } : {}),
    ...(settings.natsTlsCaFile ? { tls: { caFile: settings.natsTlsCaFile } } : {}),
  };

  /** The first stream whose subjects take all of `<prefix>.>`, if any. */
  const capturingStream = async (jsm: JetStreamManager): Promise<string | undefined> => {
    for await (const name of jsm.streams.names(captured)) {
      const info = await jsm.streams.info(name);
      if (info.config.subjects?.some((s) => subjectCovers(s, captured))) return name;
    }
    return undefined;
  };

  const setUpStream = async (connection: NatsConnection): Promise<void> => {
    const report = oncePerReason((reason: string) => log.error({ stream: settings.natsStream }, reason));
    while (!closing.signal.aborted && connection === nc) {
      try {
        const jsm = await jetstreamManager(connection, { timeout: ackTimeoutMs });
        const existing = await capturingStream(jsm);
        const named = existing ? undefined : await jsm.streams.info(settings.natsStream).catch(unlessStreamNotFound);
        if (existing) {
          log.info({ stream: existing, subjects: captured }, 'publishing to the existing JetStream stream that captures the subjects');
        } else if (named) {
          // The prefix changed: the stream keeps its old subjects (their messages stay readable) and takes the new ones.
          await jsm.streams.update(settings.natsStream, { subjects: [...(named.config.subjects ?? []), captured] });
          log.info({ stream: settings.natsStream, subjects: captured }, 'added the subjects to the existing JetStream stream');
        } else {
          await jsm.streams.add({
            name: settings.natsStream,
            subjects: [captured],
            duplicate_window: nanos(settings.natsDuplicateWindow),
            max_age: nanos(settings.natsMaxAge ?? settings.retentionDays * DAY_MS),
          });
          log.info({ stream: settings.natsStream, subjects: captured }, 'created the JetStream stream');
        }
        stream = { state: 'ready' };
        streamGeneration++;
        notifyIfUp();
        return;
      } catch (error) {
        const reason = `JetStream stream ${settings.natsStream} for ${captured} could not be set up: ${(error as Error).message}`;
        stream = { state: 'refused', error: reason };
        report(reason);
        await sleep(backoff.maxMs, undefined, { signal: closing.signal }).catch(() => {});
      }
    }
  };

  /** One set-up at a time, whether asked by the first connect or a reconnect. */
  let settingUp: Promise<void> | undefined;
  const ensureStream = (connection: NatsConnection): Promise<void> =>
    (settingUp ??= setUpStream(connection).finally(() => (settingUp = undefined)));

  /**
   * The stream vanished while connected (`nats stream rm`): the sink is down (nothing is claimed,
   * `sink_up` 0, `/readyz` down) until one set-up has found or created it again, which wakes the
   * lane. Publishes failing together share that one set-up; a stream that keeps vanishing is set
   * up again once per `backoff.maxMs` at most.
   */
  const recoverStream = async (connection: NatsConnection, generation: number): Promise<void> => {
    if (generation !== streamGeneration || stream.state !== 'ready') return;
    stream = { state: 'pending' };
    log.error({ stream: settings.natsStream, subjects: captured }, 'JetStream stream is gone; setting it up again');
    const wait = lastRecoveryAt + backoff.maxMs - performance.now();
    if (wait > 0) await sleep(wait, undefined, { signal: closing.signal }).catch(() => {});
    lastRecoveryAt = performance.now();
    // A reconnect may have set it up meanwhile.
    if (stream.state !== 'ready') await ensureStream(connection);
  };

  const watch = async (connection: NatsConnection): Promise<void> => {
    for await (const status of connection.status()) {
      if (status.type === 'disconnect') {
        connected = false;
        log.warn({ server: status.server }, 'NATS disconnected; deliveries wait in the outbox');
      } else if (status.type === 'reconnect') {
        connected = true;
        failures = 0;
        log.info({ server: status.server }, 'NATS reconnected');
        // The server may be a new one that lost the stream.
        if (jetStreamMode) void ensureStream(connection);
        else notifyIfUp();
      }
    }
  };

  const connectLoop = async (): Promise<void> => {
    const report = oncePerReason(
      (error: Error) => log.warn({ err: error }, 'NATS unreachable; deliveries wait in the outbox'),
      (error) => error.message,
    );
    while (!closing.signal.aborted) {
      try {
        const connection = await connect(options);
        if (closing.signal.aborted) return void (await connection.close());
        nc = connection;
        js = jetstream(connection, { timeout: ackTimeoutMs });
        connected = true;
        failures = 0;
        log.info({ server: connection.getServer(), mode: settings.natsMode }, 'NATS connected');
        void watch(connection);
        void connection.closed().then((error) => {
          connected = false;
          if (closing.signal.aborted) return;
          // Only a fatal error (e.g. repeated auth failures) ends a connection that reconnects forever.
          log.error({ err: error }, 'NATS connection closed; connecting again');
          nc = undefined;
          void connectLoop();
        });
        if (jetStreamMode) await ensureStream(connection);
        else notifyIfUp();
        return;
      } catch (error) {
        report(error as Error);
        await sleep(nextDelay(), undefined, { signal: closing.signal }).catch(() => {});
      }
    }
  };

  /** Core publishes have no ack; a flush (the server's PONG) proves the message reached it. */
  const flushed = async (connection: NatsConnection): Promise<void> => {
    if (!(await settlesWithin(connection.flush(), ackTimeoutMs))) {
      throw new RetryableFailure('nats_flush_timeout', `no flush from NATS within ${ackTimeoutMs} ms`);
    }
  };

  return {
    name: NATS_SINK,
    concurrency,
    maxAttempts: Number.POSITIVE_INFINITY,
    attemptTimeoutMs: ackTimeoutMs,
    ordering: settings.natsOrdering,
    start() {
      void connectLoop();
    },
    spanName: (event) => `publish ${subjectFor(prefix, event)}`,
    async deliver(event: CloudEvent, _signal, trace) {
      const connection = nc;
      if (!connection || !connected) throw new RetryableFailure('nats_down', 'not connected to NATS');
      const subject = subjectFor(prefix, event);
      const payload = JSON.stringify(event);
      const maxPayload = connection.info?.max_payload ?? Number.POSITIVE_INFINITY;
      if (Buffer.byteLength(payload) > maxPayload) {
        throw new PermanentFailure('nats_payload_too_large', `event exceeds the server's max_payload of ${maxPayload} bytes`);
      }
      const h = headers();
      // Consumers continue the trace of the attempt (tracing on).
      if (trace?.traceparent) h.set('traceparent', trace.traceparent);
      if (!jetStreamMode) {
        h.set('Nats-Msg-Id', event.id);
        connection.publish(subject, payload, { headers: h });
        return flushed(connection);
      }
      if (stream.state !== 'ready' || !js) {
        throw new RetryableFailure('nats_stream_unavailable', stream.state === 'refused' ? stream.error : 'stream not set up yet');
      }
      const generation = streamGeneration;
      try {
        await js.publish(subject, payload, { msgID: event.id, timeout: ackTimeoutMs, headers: h });
      } catch (error) {
        if (!noStreamCaptures(error)) throw new RetryableFailure('nats_no_ack', (error as Error).message, { cause: error });
        void recoverStream(connection, generation);
        throw new RetryableFailure('nats_stream_missing', `no JetStream stream captures ${subject}`, { cause: error });
      }
    },
    up: isUp,
    onUp(listener) {
      listeners.add(listener);
    },
    check() {
      if (stream.state === 'refused') return { state: 'error', error: stream.error };
      return { state: isUp() ? 'ok' : 'down' };
    },
    /** Sends what is buffered and closes; a connection that is down is just closed. */
    async close() {
      closing.abort();
      const connection = nc;
      nc = undefined;
      if (!connection || connection.isClosed()) return;
      if (!connected) return connection.close();
      if (!(await settlesWithin(connection.drain(), ackTimeoutMs))) await connection.close();
    },
  };
}

/**
 * A publish that no stream took: nobody answered the request (the library reports it as "jetstream
 * is not enabled", caused by a no-responders RequestError) or the server named the stream missing.
 */
function noStreamCaptures(error: unknown): boolean {
  if (error instanceof JetStreamApiError) return error.code === JetStreamApiCodes.StreamNotFound;
  const cause = (error as { cause?: unknown } | undefined)?.cause;
  return cause instanceof RequestError && cause.isNoResponders();
}

/** `streams.info` for a name that may be free: undefined when no stream has it. */
function unlessStreamNotFound(error: unknown): undefined {
  if (error instanceof JetStreamApiError && error.code === JetStreamApiCodes.StreamNotFound) return undefined;
  throw error;
}

/** A failure retried in a loop is logged once per distinct reason, not at every attempt. */
function oncePerReason<T>(log: (failure: T) => void, reasonOf: (failure: T) => string = String): (failure: T) => void {
  let last: string | undefined;
  return (failure) => {
    const reason = reasonOf(failure);
    if (reason !== last) log(failure);
    last = reason;
  };
}

/** True when `promise` resolves within `ms`; false when it rejects or takes longer. */
async function settlesWithin(promise: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<boolean>((resolve) => (timer = setTimeout(resolve, ms, false)));
  try {
    return await Promise.race([promise.then(() => true, () => false), late]);
  } finally {
    clearTimeout(timer);
  }
}
