import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { Kafka, type Message, type Producer, type SASLOptions } from 'kafkajs';
import pTimeout from 'p-timeout';
import type { Config } from '../config/schema.js';
import { describeError } from '../errors.js';
import { groupCommit, type Outcome } from '../group-commit.js';
import { oncePerReason, untrusted, type Logger } from '../log.js';
import { busSink, type BusDefinition, type BusLink, type BusSinkOptions, DEFAULT_ACK_TIMEOUT_MS, DEFAULT_BACKOFF } from './bus.js';
import { BusRefusedError, BusUnavailableError, asSinkFailure, type SinkFailure } from './failures.js';

export const KAFKA_SINK = 'kafka';

type KafkaSettings = Pick<
  Config,
  'kafkaBrokers' | 'kafkaTopic' | 'kafkaClientId' | 'kafkaSaslMechanism' | 'kafkaSaslUsername' | 'kafkaSaslPassword' | 'kafkaTls' | 'kafkaTlsCaFile' | 'kafkaOrdering'
>;

/** A request's records stay under the brokers' default batch limit (`message.max.bytes`, about 1 MB). */
const BATCH_BYTES = 512 * 1024;

/** The key of an event without a box: its records still share one partition. */
const NO_BOX_KEY = '_';

/**
 * Produce errors no attempt can change (contract section 18): no rights on the topic, a record or
 * batch over the broker's limits, a topic name or record it rejects, a topic it will not create
 * (once kafkajs's own retries of that retriable code are spent).
 */
const REFUSED = new Set([
  'TOPIC_AUTHORIZATION_FAILED',
  'MESSAGE_TOO_LARGE',
  'RECORD_LIST_TOO_LARGE',
  'INVALID_TOPIC_EXCEPTION',
  'INVALID_RECORD',
  'POLICY_VIOLATION',
  'UNKNOWN_TOPIC_OR_PARTITION',
]);

/**
 * The Kafka sink: one record per event in CloudEvents' structured mode, done when every in-sync
 * replica has it (acks all). Not idempotent: the relay sends each event once per sink and consumers
 * dedupe by `ce_id`. kafkajs reconnects lazily and says nothing when a broker goes away, so a publish
 * failing without a broker's answer marks the sink down until a fresh connection succeeds.
 */
export function createKafkaSink({ settings, logger, ackTimeoutMs = DEFAULT_ACK_TIMEOUT_MS, backoff = DEFAULT_BACKOFF }: BusSinkOptions<KafkaSettings>) {
  const log = logger.child({ sink: KAFKA_SINK });
  const topic = settings.kafkaTopic;
  const kafka = new Kafka({
    clientId: settings.kafkaClientId,
    brokers: settings.kafkaBrokers ?? [],
    ssl: settings.kafkaTls ? (settings.kafkaTlsCaFile ? { ca: [readFileSync(settings.kafkaTlsCaFile, 'utf8')] } : true) : false,
    ...(settings.kafkaSaslMechanism ? { sasl: saslOptions(settings) } : {}),
    connectionTimeout: ackTimeoutMs,
    requestTimeout: ackTimeoutMs,
    // The outbox retries on the hooks' schedule; kafkajs's own retries only bridge a leader change.
    retry: { retries: 2, initialRetryTime: 100, maxRetryTime: ackTimeoutMs },
    logCreator: kafkaLog(log),
  });
  const producer: Producer = kafka.producer({ idempotent: false, allowAutoTopicCreation: true });
  /**
   * The cluster answers a request's records of a partition together, so a refused batch is tried
   * again record by record: only the refused one fails.
   */
  const send = async (batch: Message[]): Promise<Outcome<void>[]> => {
    try {
      await producer.send({ topic, acks: -1, messages: batch });
      return batch.map(() => ({ value: undefined }));
    } catch (error) {
      if (batch.length > 1 && classifyKafka(error) instanceof BusRefusedError) return (await Promise.all(batch.map((record) => send([record]).catch((failure: unknown) => [{ error: failure }])))).flat();
      throw error;
    }
  };
  // The records published in one turn go in one request, any number of requests under way.
  const batches = groupCommit<Message, void>({ commit: send, concurrency: Infinity, bytesOf: (message) => Buffer.byteLength(message.value as string), maxBytes: BATCH_BYTES });
  const stopping = new AbortController();
  let link: BusLink | undefined;
  let reconnecting = false;
  const report = oncePerReason((error: unknown) => log.warn({ err: error }, 'Kafka unreachable; deliveries wait in the outbox'), describeError);

  const connectUntilUp = async (): Promise<void> => {
    for (let failures = 0; !stopping.signal.aborted; failures++) {
      try {
        await producer.connect();
        if (stopping.signal.aborted) return;
        log.info({ brokers: settings.kafkaBrokers }, 'Kafka connected');
        return link?.up();
      } catch (error) {
        report(error);
        link?.down(untrusted(describeError(error), 200));
        await sleep(Math.min(backoff.maxMs, backoff.minMs * 2 ** failures), undefined, { signal: stopping.signal }).catch(() => {});
      }
    }
  };

  /** A publish that failed without the cluster's answer: the connection is dropped and made again. */
  const lost = (reason: string): void => {
    link?.down(reason);
    if (reconnecting || stopping.signal.aborted) return;
    reconnecting = true;
    void producer
      .disconnect()
      .catch(() => {})
      .then(connectUntilUp)
      .finally(() => (reconnecting = false));
  };

  return busSink<Message>({
    name: KAFKA_SINK,
    ordering: settings.kafkaOrdering,
    // Publishes of one turn share a request; requests are pipelined on the partition leader's connection.
    concurrency: 256,
    ackTimeoutMs,
    spanName: () => `publish ${topic}`,
    message: (event, body, traceparent) => ({
      key: event.subject ?? NO_BOX_KEY,
      value: body,
      headers: {
        'content-type': 'application/cloudevents+json',
        ce_id: event.id,
        ce_boxrelayaccount: event.boxrelayaccount,
        ...(traceparent ? { traceparent } : {}),
      },
    }),
    connect(busLink) {
      link = busLink;
      void connectUntilUp();
    },
    publish: (message) => batches.add(message),
    classify(error) {
      const failure = classifyKafka(error);
      if (failure instanceof BusUnavailableError && protocolErrorIn(error) === undefined) lost(failure.message);
      return failure;
    },
    async close() {
      stopping.abort();
      // What is under way may finish within the ack timeout.
      await pTimeout(batches.flush(), { milliseconds: ackTimeoutMs, message: false });
      await producer.disconnect().catch(() => {});
    },
  });
}

function saslOptions(settings: KafkaSettings): SASLOptions {
  const username = settings.kafkaSaslUsername ?? '';
  const password = settings.kafkaSaslPassword ?? '';
  switch (settings.kafkaSaslMechanism) {
    case 'scram-sha-256':
      return { mechanism: 'scram-sha-256', username, password };
    case 'scram-sha-512':
      return { mechanism: 'scram-sha-512', username, password };
    default:
      return { mechanism: 'plain', username, password };
  }
}

/** kafkajs's own log at debug: the sink reports outages once per reason itself. */
function kafkaLog(log: Logger) {
  return () =>
    ({ namespace, log: entry }: { namespace: string; log: { message: string } }) =>
      log.debug({ kafkajs: namespace }, untrusted(entry.message, 200));
}

/** The broker's answer to a request, when the failure (or what it wraps) carries one. */
function protocolErrorIn(error: unknown): { type: string; message: string } | undefined {
  for (let cause: unknown = error; cause instanceof Error; cause = cause.cause) {
    if (cause.name === 'KafkaJSProtocolError') return cause as Error & { type: string };
  }
  return undefined;
}

function classifyKafka(error: unknown): SinkFailure {
  if (!(error instanceof Error)) return asSinkFailure(error);
  const answer = protocolErrorIn(error);
  if (answer && REFUSED.has(answer.type)) return new BusRefusedError(KAFKA_SINK, answer.type.toLowerCase(), untrusted(answer.message, 200));
  return new BusUnavailableError(KAFKA_SINK, 'unavailable', untrusted(describeError(answer ?? error), 200));
}

export const kafkaBus: BusDefinition = {
  name: KAFKA_SINK,
  url: (config) => config.kafkaBrokers?.join(','),
  create: ({ config, url, logger, tuning }) => createKafkaSink({ settings: config, url, logger, ...tuning }),
};
