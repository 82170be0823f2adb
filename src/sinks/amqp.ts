import { AMQPError, Connection, type Envelope, type Publisher } from 'rabbitmq-client';
import pTimeout from 'p-timeout';
import type { Config } from '../config/schema.js';
import { describeError } from '../errors.js';
import { oncePerReason, untrusted } from '../log.js';
import { busSink, type BusDefinition, type BusLink, type BusSinkOptions, DEFAULT_ACK_TIMEOUT_MS, DEFAULT_BACKOFF } from './bus.js';
import { BusRefusedError, BusUnavailableError, asSinkFailure, type SinkFailure } from './failures.js';
import { routingTokens } from './nats-subject.js';

export const AMQP_SINK = 'amqp';

type AmqpSettings = Pick<Config, 'amqpExchange' | 'amqpQueue' | 'amqpOrdering'>;

/** AMQP 0-9-1 short strings (routing key, message id, type) hold at most 255 bytes. */
const SHORT_STRING_BYTES = 255;

/** What the broker answers to a publish it will never take: no rights on the key, no such exchange, too large. */
const REFUSALS = new Set(['ACCESS_REFUSED', 'NOT_FOUND', 'PRECONDITION_FAILED']);

interface AmqpMessage {
  envelope: Envelope;
  body: Buffer;
}

/**
 * The RabbitMQ sink: persistent messages on a durable topic exchange, done at the publisher confirm.
 * rabbitmq-client reconnects and reopens the publisher's channel by itself; the exchange (and queue)
 * are declared on every connection, and the sink is up only once that worked.
 */
export function createAmqpSink({ settings, url, logger, ackTimeoutMs = DEFAULT_ACK_TIMEOUT_MS, backoff = DEFAULT_BACKOFF }: BusSinkOptions<AmqpSettings>) {
  const log = logger.child({ sink: AMQP_SINK });
  const exchange = settings.amqpExchange;
  let rabbit: Connection | undefined;
  let publisher: Publisher | undefined;
  /** Each connection's declarations; a later connection's make an earlier one's result moot. */
  let generation = 0;

  const declare = async (connection: Connection): Promise<void> => {
    const channel = await connection.acquire();
    try {
      await channel.exchangeDeclare({ exchange, type: 'topic', durable: true });
      if (settings.amqpQueue !== undefined) {
        await channel.queueDeclare({ queue: settings.amqpQueue, durable: true });
        await channel.queueBind({ queue: settings.amqpQueue, exchange, routingKey: '#' });
      }
    } finally {
      await channel.close().catch(() => {});
    }
  };

  /** Declares until it works or the connection is replaced; a refusal is shown on `/readyz` and logged once. */
  const setUp = async (connection: Connection, link: BusLink, current: number): Promise<void> => {
    const report = oncePerReason((reason: string) => log.error({ exchange, queue: settings.amqpQueue }, reason));
    while (current === generation && connection.ready) {
      try {
        await declare(connection);
        if (current !== generation) return;
        log.info({ exchange, queue: settings.amqpQueue }, 'RabbitMQ connected; exchange declared');
        return link.up();
      } catch (error) {
        if (current !== generation) return;
        const reason = `RabbitMQ refused declaring exchange ${exchange}${settings.amqpQueue ? ` and queue ${settings.amqpQueue}` : ''}: ${describeError(error)}`;
        report(reason);
        if (!connection.ready) return link.down();
        link.refused(reason);
        await new Promise((resolve) => setTimeout(resolve, backoff.maxMs).unref());
      }
    }
  };

  return busSink<AmqpMessage>({
    name: AMQP_SINK,
    ordering: settings.amqpOrdering,
    concurrency: 256,
    ackTimeoutMs,
    spanName: (event) => `publish ${exchange} ${routingTokens(event).join('.')}`,
    message(event, body, traceparent) {
      const routingKey = routingTokens(event).join('.');
      const long = [routingKey, event.id, event.type].some((text) => Buffer.byteLength(text) > SHORT_STRING_BYTES);
      if (long) throw new BusRefusedError(AMQP_SINK, 'invalid_message', `routing key, event id or type over AMQP's ${SHORT_STRING_BYTES} bytes`);
      const seconds = Math.floor(Date.parse(event.time) / 1000);
      return {
        envelope: {
          exchange,
          routingKey,
          durable: true,
          contentType: 'application/cloudevents+json',
          messageId: event.id,
          type: event.type,
          ...(Number.isFinite(seconds) ? { timestamp: seconds } : {}),
          ...(traceparent ? { headers: { traceparent } } : {}),
        },
        body: Buffer.from(body),
      };
    },
    connect(link) {
      const report = oncePerReason((error: Error) => log.warn({ err: error }, 'RabbitMQ unreachable; deliveries wait in the outbox'), (error) => error.message);
      const connection = new Connection({ url, connectionName: 'boxrelay', retryLow: backoff.minMs, retryHigh: backoff.maxMs, connectionTimeout: ackTimeoutMs });
      connection.on('error', (error) => {
        // Emitted when a connection is lost or cannot be made (once per outage).
        if (!connection.ready) link.down();
        report(error);
      });
      connection.on('connection', () => void setUp(connection, link, ++generation));
      rabbit = connection;
      publisher = connection.createPublisher({ confirm: true, maxAttempts: 1 });
    },
    async publish({ envelope, body }) {
      if (!publisher) throw new BusUnavailableError(AMQP_SINK, 'down', 'not connected to RabbitMQ');
      await publisher.send(envelope, body);
    },
    classify: (error, message) => classifyAmqp(error, message.envelope.routingKey ?? ''),
    async close() {
      generation++;
      const connection = rabbit;
      rabbit = undefined;
      if (!connection) return;
      const closing = Promise.allSettled([publisher?.close(), connection.close()]);
      publisher = undefined;
      await pTimeout(closing, { milliseconds: ackTimeoutMs, message: false });
    },
  });
}

/**
 * A publish the broker refused (it closes the channel, naming the method) is refused for good; the
 * publishes in flight on that channel fail with it. An access refusal names its routing key, so only
 * the event on that key is a dead letter; the others are retried. Anything else is retried too.
 */
function classifyAmqp(error: unknown, routingKey: string): SinkFailure {
  if (!(error instanceof AMQPError)) return asSinkFailure(error);
  const message = untrusted(error.message, 300);
  const refusedPublish = REFUSALS.has(error.code) && message.startsWith('BasicPublish:');
  const topic = /topic '([^']*)'/.exec(message)?.[1];
  if (refusedPublish && (topic === undefined || topic === routingKey)) {
    return new BusRefusedError(AMQP_SINK, error.code.toLowerCase(), message);
  }
  return new BusUnavailableError(AMQP_SINK, 'unavailable', `${error.code}: ${message}`);
}

export const amqpBus: BusDefinition = {
  name: AMQP_SINK,
  url: (config) => config.amqpUrl,
  create: ({ config, url, logger, tuning }) => createAmqpSink({ settings: config, url, logger, ...tuning }),
};
