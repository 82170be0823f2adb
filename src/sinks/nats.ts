import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import pTimeout from 'p-timeout';
import {
  JetStreamApiCodes,
  JetStreamApiError,
  jetstreamManager,
  type JetStreamManager,
} from '@nats-io/jetstream';
import {
  MsgHdrsImpl,
  connect,
  credsAuthenticator,
  errors,
  nanos,
  type NatsConnection,
  type NodeConnectionOptions,
} from '@nats-io/transport-node';
import type { AccountConfig, Config } from '../config/schema.js';
import { receiverId, type CloudEvent } from '../events/cloudevent.js';
import { DAY_MS } from '../clock.js';
import { describeError } from '../errors.js';
import { oncePerReason, untrusted, type Logger } from '../log.js';
import { createAckInbox, NoStreamCaptures, type AckInbox } from './nats-acks.js';
import { subjectCovers, subjectFor } from './nats-subject.js';
import type { Bus, BusDefinition } from './bus.js';
import {
  BusDownError,
  NatsFlushTimeoutError,
  NatsInvalidMessageError,
  NatsNoAckError,
  NatsPayloadTooLargeError,
  NatsPermissionDeniedError,
  NatsStreamMissingError,
  NatsStreamUnavailableError,
  NatsSubjectTooLongError,
  eventJson,
} from './failures.js';

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
> & { natsUrl: string; /** Accounts with subjects under a prefix of their own (contract section 21). */ accounts?: Pick<AccountConfig, 'name' | 'natsSubjectPrefix'>[] };

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

export const NATS_SINK = 'nats';

/** Subjects come from event types and box ids: cut short to this many characters where they are shown. */
const SUBJECT_SHOWN = 120;

/**
 * `check()`, the `/readyz` detail: down while disconnected or while the stream is set up (again), error
 * (with the reason) when it is refused; ok, with the last subject the server refused to take
 * (permissions), when up.
 */
export type NatsSink = Bus;

export const natsBus: BusDefinition = {
  name: NATS_SINK,
  url: (config) => config.natsUrl,
  create: ({ config, url, logger, tuning }) => createNatsSink({ settings: { ...config, natsUrl: url }, logger, ...tuning }),
};

/**
 * The NATS sink. JetStream mode publishes with `Nats-Msg-Id` = event id and waits for the ack, after
 * making sure a stream captures `<prefix>.>`; core mode publishes and flushes. The connection is
 * retried forever, so an outage only parks the work in the outbox.
 */
export function createNatsSink({ settings, logger, ackTimeoutMs = 5000, concurrency = 256, backoff = { minMs: 250, maxMs: 5000 } }: NatsSinkOptions): NatsSink {
  const log = logger.child({ sink: NATS_SINK });
  const prefix = settings.natsSubjectPrefix;
  const captured = `${prefix}.>`;
  const accountPrefixes = new Map((settings.accounts ?? []).flatMap((account) => (account.natsSubjectPrefix === undefined ? [] : [[account.name, account.natsSubjectPrefix] as const])));
  const prefixOf = (event: CloudEvent) => accountPrefixes.get(event.boxrelayaccount) ?? prefix;
  // Every account's subjects go to the one stream; a prefix under another's is captured by it already
  // (and JetStream refuses overlapping subjects in a stream).
  const allCaptured = [...new Set([prefix, ...accountPrefixes.values()])]
    .map((p) => `${p}.>`)
    .filter((subject, _i, all) => !all.some((other) => other !== subject && subjectCovers(other, subject)));
  const ours = (subject: string) => allCaptured.some((captures) => subjectCovers(captures, subject));
  const notCapturedBy = (subjects: string[] | undefined) => allCaptured.filter((wanted) => !(subjects ?? []).some((s) => subjectCovers(s, wanted)));
  const jetStreamMode = settings.natsMode === 'jetstream';
  const closing = new AbortController();
  const listeners = new Set<() => void>();

  let state: State = { name: 'connecting' };
  /** When a lost stream was last set up again: once per `backoff.maxMs` at most. */
  let lastRecoveryAt = Number.NEGATIVE_INFINITY;
  const denials = createDenials();
  let failures = 0;
  const nextDelay = () => Math.min(backoff.maxMs, backoff.minMs * 2 ** failures++) * (0.75 + Math.random() / 2);

  /** Whether `session` is the one whose stream set-up is under way (or refused, to be tried again). */
  const settingUp = (session: Session) => (state.name === 'settingUpStream' || state.name === 'streamRefused') && state.session === session;

  /**
   * Every transition of the sink's state. A new session is started by each connect and reconnect;
   * leaving a session aborts its set-up, so set-up work of an earlier session (or a publish that saw
   * an earlier `ready`) cannot change the state of a later one.
   */
  const on = (input: Input): void => {
    const previous = state;
    switch (input.type) {
      case 'connected': {
        if (previous.name === 'closed') return;
        failures = 0;
        const session: Session = { connection: input.connection, ended: new AbortController() };
        // A reconnect may reach a new server that lost the stream: each session sets it up.
        state = jetStreamMode ? { name: 'settingUpStream', session } : { name: 'ready', session };
        if (jetStreamMode) void setUpStream(session, 0);
        break;
      }
      case 'disconnected':
        if (sessionOf(previous)?.connection !== input.connection) return;
        state = { name: 'disconnected', connection: input.connection };
        break;
      case 'lost':
        if (previous.name === 'closed' || connectionOf(previous) !== input.connection) return;
        state = { name: 'connecting' };
        break;
      case 'streamReady':
        if (!settingUp(input.session)) return;
        state = { name: 'ready', session: input.session };
        break;
      case 'streamRefused':
        if (!settingUp(input.session)) return;
        state = { name: 'streamRefused', session: input.session, error: input.error };
        break;
      case 'streamMissing': {
        // Publishes failing together share one set-up: only the first still sees the `ready` it started in.
        if (previous !== input.ready) return;
        log.error({ stream: settings.natsStream, subjects: captured }, 'JetStream stream is gone; setting it up again');
        state = { name: 'settingUpStream', session: input.ready.session };
        const wait = Math.max(0, lastRecoveryAt + backoff.maxMs - performance.now());
        lastRecoveryAt = performance.now() + wait;
        void setUpStream(input.ready.session, wait);
        break;
      }
      case 'close':
        state = { name: 'closed' };
        closing.abort();
        break;
    }
    const left = sessionOf(previous);
    if (left && left !== sessionOf(state)) left.ended.abort();
    if (state.name === 'ready') for (const listener of listeners) listener();
  };

  const options: NodeConnectionOptions = {
    servers: settings.natsUrl.split(',').map((s) => s.trim()),
    name: 'boxrelay',
    maxReconnectAttempts: -1,
    reconnectDelayHandler: steadyUntilPassed(nextDelay),
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

  /** Finds, extends or creates the stream for `session`, after `wait` ms, then every `backoff.maxMs` while refused. */
  const setUpStream = async (session: Session, wait: number): Promise<void> => {
    const report = oncePerReason((reason: string) => log.error({ stream: settings.natsStream }, reason));
    for (let delay = wait; ; delay = backoff.maxMs) {
      if (delay > 0) await sleep(delay, undefined, { signal: session.ended.signal }).catch(() => {});
      if (!settingUp(session)) return;
      try {
        const jsm = await jetstreamManager(session.connection, { timeout: ackTimeoutMs });
        const capturing = await capturingStream(jsm);
        const named = capturing ? undefined : await jsm.streams.info(settings.natsStream).catch(unlessStreamNotFound);
        // Named but not listed as capturing: created by another replica between the two looks (replicas
        // starting together); adding its subjects again would be refused as duplicates.
        const existing = capturing ?? (named?.config.subjects?.some((s) => subjectCovers(s, captured)) ? named.config.name : undefined);
        if (!settingUp(session)) return;
        const kept = existing ? (await jsm.streams.info(existing)).config : named?.config;
        const missing = notCapturedBy(kept?.subjects);
        if (kept && missing.length === 0) {
          log.info({ stream: kept.name, subjects: allCaptured }, 'publishing to the existing JetStream stream that captures the subjects');
        } else if (kept) {
          // The prefix changed, or an account has a prefix of its own: the stream keeps its old subjects
          // (their messages stay readable) and takes the new ones.
          await jsm.streams.update(kept.name, { subjects: [...(kept.subjects ?? []), ...missing] });
          log.info({ stream: kept.name, subjects: missing }, 'added the subjects to the existing JetStream stream');
        } else {
          await jsm.streams.add({
            name: settings.natsStream,
            subjects: allCaptured,
            duplicate_window: nanos(settings.natsDuplicateWindow),
            max_age: nanos(settings.natsMaxAge ?? settings.retentionDays * DAY_MS),
          });
          log.info({ stream: settings.natsStream, subjects: allCaptured }, 'created the JetStream stream');
        }
        return on({ type: 'streamReady', session });
      } catch (error) {
        if (!settingUp(session)) return;
        const reason = `JetStream stream ${settings.natsStream} for ${allCaptured.join(', ')} could not be set up: ${describeError(error)}`;
        report(reason);
        on({ type: 'streamRefused', session, error: reason });
      }
    }
  };

  const watch = async (connection: NatsConnection): Promise<void> => {
    const reportDenial = oncePerReason((subject: string) =>
      log.warn({ subject: untrusted(subject, SUBJECT_SHOWN) }, 'NATS refused a publish (permissions violation); events on that subject are dead letters'),
    );
    for await (const status of connection.status()) {
      if (status.type === 'disconnect') {
        on({ type: 'disconnected', connection });
        log.warn({ server: status.server }, 'NATS disconnected; deliveries wait in the outbox');
      } else if (status.type === 'reconnect') {
        log.info({ server: status.server }, 'NATS reconnected');
        on({ type: 'connected', connection });
      } else if (status.type === 'error' && isPublishDenied(status.error) && ours(status.error.subject)) {
        // Refusals of the JetStream API are the stream set-up's to report.
        denials.add(status.error.subject);
        reportDenial(status.error.subject);
        // No ack will come for a refused publish.
        inboxes.get(connection)?.refuse(status.error.subject, denied(status.error.subject));
      }
    }
  };

  const connectLoop = async (): Promise<void> => {
    const report = oncePerReason((error: unknown) => log.warn({ err: error }, 'NATS unreachable; deliveries wait in the outbox'), describeError);
    while (!closing.signal.aborted) {
      try {
        const connection = await connect(options);
        if (closing.signal.aborted) return void (await connection.close());
        log.info({ server: connection.getServer(), mode: settings.natsMode }, 'NATS connected');
        void watch(connection);
        void connection.closed().then((error) => {
          if (closing.signal.aborted) return;
          // Only a fatal error (e.g. repeated auth failures) ends a connection that reconnects forever.
          log.error({ err: error }, 'NATS connection closed; connecting again');
          on({ type: 'lost', connection });
          void connectLoop();
        });
        return on({ type: 'connected', connection });
      } catch (error) {
        report(error);
        await sleep(nextDelay(), undefined, { signal: closing.signal }).catch(() => {});
      }
    }
  };

  /** Core publishes have no ack; a flush (the server's PONG) proves the message reached it. */
  const flushed = (connection: NatsConnection): Promise<void> =>
    pTimeout(connection.flush(), { milliseconds: ackTimeoutMs }).catch((error: unknown) => {
      throw new NatsFlushTimeoutError(ackTimeoutMs, { cause: error });
    });

  const denied = (subject: string) => new NatsPermissionDeniedError(untrusted(subject, SUBJECT_SHOWN));

  /** Each connection's inbox for JetStream acks, made at its first publish; its subscription lasts across reconnects. */
  const inboxes = new WeakMap<NatsConnection, AckInbox>();
  const acksOf = (connection: NatsConnection): AckInbox => {
    let inbox = inboxes.get(connection);
    if (!inbox) inboxes.set(connection, (inbox = createAckInbox(connection, { timeoutMs: ackTimeoutMs, noAck: (ms) => new NatsNoAckError(`no JetStream ack within ${ms} ms`) })));
    return inbox;
  };

  return {
    name: NATS_SINK,
    concurrency,
    maxAttempts: Number.POSITIVE_INFINITY,
    attemptTimeoutMs: ackTimeoutMs,
    ordering: settings.natsOrdering,
    spanKind: 'producer',
    start() {
      void connectLoop();
    },
    spanName: (event) => `publish ${subjectFor(prefixOf(event), event)}`,
    async deliver(event: CloudEvent, _signal, trace) {
      const current = state;
      if (current.name === 'streamRefused') throw new NatsStreamUnavailableError(current.error);
      if (current.name === 'settingUpStream') throw new NatsStreamUnavailableError('stream not set up yet');
      if (current.name !== 'ready') throw new BusDownError(NATS_SINK);
      const { connection } = current.session;
      const { subject, payload, headers } = natsMessage(prefixOf(event), event, connection.info?.max_payload, trace?.traceparent);
      // The last word before the publish (a lease run out since the admission, a pause told meanwhile).
      trace?.starting?.();
      if (!jetStreamMode) {
        const denialsBefore = denials.count();
        connection.publish(subject, payload, { headers });
        await flushed(connection);
        // The server answers a denied publish with an error before the flush's PONG; once the
        // events already read are handled (one macrotask), the denial is known.
        await new Promise((resolve) => setImmediate(resolve));
        if (denials.since(denialsBefore, subject)) throw denied(subject);
        return denials.allowed(subject);
      }
      try {
        await acksOf(connection).publish(subject, payload, headers);
        denials.allowed(subject);
      } catch (error) {
        if (error instanceof NatsPermissionDeniedError || error instanceof NatsNoAckError) throw error;
        if (!(error instanceof NoStreamCaptures)) throw new NatsNoAckError(describeError(error), { cause: error });
        on({ type: 'streamMissing', ready: current });
        throw new NatsStreamMissingError(untrusted(subject, SUBJECT_SHOWN), { cause: error });
      }
    },
    up: () => state.name === 'ready',
    onUp(listener) {
      listeners.add(listener);
    },
    check() {
      if (state.name === 'streamRefused') return { state: 'error', error: state.error };
      if (state.name !== 'ready') return { state: 'down' };
      const subject = denials.last();
      // Up for every other subject; the refusal is still worth showing.
      return subject === undefined ? { state: 'ok' } : { state: 'ok', error: `NATS refused publishing to ${untrusted(subject, SUBJECT_SHOWN)} (permissions violation); such events are dead letters` };
    },
    /** Sends what is buffered and closes; a connection that is down is just closed. */
    async close() {
      const previous = state;
      on({ type: 'close' });
      const connection = connectionOf(previous);
      if (!connection || connection.isClosed()) return;
      if (previous.name === 'disconnected') return connection.close();
      await pTimeout(connection.drain(), { milliseconds: ackTimeoutMs }).catch(() => connection.close());
    },
  };
}

/** One connection, or one reconnection of it: work started for a session ends with it. */
interface Session {
  connection: NatsConnection;
  /** Aborted when the sink leaves the session (disconnect, close): ends its set-up's waits. */
  ended: AbortController;
}

/**
 * The sink's one state: `ready` is up (`sink_up` 1, rows claimed); every other state holds the work
 * in the outbox. In core mode a session is `ready` at once.
 */
type State =
  | { name: 'connecting' }
  | { name: 'settingUpStream'; session: Session }
  | { name: 'ready'; session: Session }
  | { name: 'streamRefused'; session: Session; error: string }
  | { name: 'disconnected'; connection: NatsConnection }
  | { name: 'closed' };

/** What moves the state: the connection's events, the stream set-up's results, a publish that found no stream, close(). */
type Input =
  | { type: 'connected' | 'disconnected' | 'lost'; connection: NatsConnection }
  | { type: 'streamReady'; session: Session }
  | { type: 'streamRefused'; session: Session; error: string }
  | { type: 'streamMissing'; ready: Extract<State, { name: 'ready' }> }
  | { type: 'close' };

function sessionOf(state: State): Session | undefined {
  return 'session' in state ? state.session : undefined;
}

function connectionOf(state: State): NatsConnection | undefined {
  return state.name === 'disconnected' ? state.connection : sessionOf(state)?.connection;
}

/**
 * The subject shares the server's control line (`max_control_line`, 4 KB by default) with the verb,
 * the reply inbox and two sizes; a longer line makes the server drop the connection.
 */
export const MAX_SUBJECT_BYTES = 4096 - 128;

/**
 * The message for an event, or a PermanentFailure for one NATS can never take: sent anyway, a
 * subject over the control line breaks the connection, and a payload over `max_payload` is refused.
 * Checked before publishing, so the connection is never put at risk.
 */
function natsMessage(
  prefix: string,
  event: CloudEvent,
  maxPayload = Number.POSITIVE_INFINITY,
  traceparent?: string,
): { subject: string; payload: string; headers: MsgHdrsImpl } {
  const subject = subjectFor(prefix, event);
  const subjectBytes = Buffer.byteLength(subject);
  if (subjectBytes > MAX_SUBJECT_BYTES) {
    throw new NatsSubjectTooLongError(subjectBytes, MAX_SUBJECT_BYTES);
  }
  const headers = new MsgHdrsImpl();
  try {
    headers.set('Nats-Msg-Id', receiverId(event));
  } catch {
    throw new NatsInvalidMessageError();
  }
  // Consumers continue the trace of the attempt (tracing on).
  if (traceparent) headers.set('traceparent', traceparent);
  const payload = eventJson(event);
  const size = Buffer.byteLength(payload) + headers.encode().length;
  if (size > maxPayload) {
    throw new NatsPayloadTooLargeError(size, maxPayload);
  }
  return { subject, payload, headers };
}


/** The subjects the server refused to take from the relay (permissions), newest last, a bounded few. */
function createDenials() {
  const bySubject = new Map<string, number>();
  let count = 0;
  return {
    count: () => count,
    add(subject: string) {
      bySubject.delete(subject);
      bySubject.set(subject, ++count);
      if (bySubject.size > 1000) bySubject.delete(bySubject.keys().next().value as string);
    },
    /** Whether `subject` was refused after the count was `before`. */
    since: (before: number, subject: string) => (bySubject.get(subject) ?? 0) > before,
    /** A publish to `subject` went through: the rights were granted since. */
    allowed: (subject: string) => void bySubject.delete(subject),
    last: (): string | undefined => [...bySubject.keys()].at(-1),
  };
}

/** The server refused a publish (permissions); a request to that subject ends with it as its cause. */
function isPublishDenied(error: unknown): error is InstanceType<typeof errors.PermissionViolationError> {
  return error instanceof errors.PermissionViolationError && error.operation === 'publish';
}

/** `streams.info` for a name that may be free: undefined when no stream has it. */
function unlessStreamNotFound(error: unknown): undefined {
  if (error instanceof JetStreamApiError && error.code === JetStreamApiCodes.StreamNotFound) return undefined;
  throw error;
}

/**
 * nats.js asks for the reconnect delay at every turn of its dial loop, not once per dial, and dials
 * only when the delay it got has passed since the last dial: a growing answer at each call would put
 * the next dial off until the delays reach their maximum. The same delay is answered until it has passed.
 */
function steadyUntilPassed(nextDelay: () => number): () => number {
  let current = { delay: 0, until: Number.NEGATIVE_INFINITY };
  return () => {
    const now = Date.now();
    if (now >= current.until) {
      const delay = nextDelay();
      current = { delay, until: now + delay };
    }
    return current.delay;
  };
}
