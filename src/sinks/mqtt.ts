import { randomBytes } from 'node:crypto';
import { connect, ErrorWithReasonCode, type IClientPublishOptions, type MqttClient } from 'mqtt';
import pTimeout from 'p-timeout';
import type { Config } from '../config/schema.js';
import { oncePerReason, untrusted } from '../log.js';
import { busSink, type BusDefinition, type BusLink, type BusSinkOptions, DEFAULT_ACK_TIMEOUT_MS, DEFAULT_BACKOFF } from './bus.js';
import { BusRefusedError, BusUnavailableError, asSinkFailure, type SinkFailure } from './failures.js';
import { routingTokens } from './nats-subject.js';

export const MQTT_SINK = 'mqtt';

type MqttSettings = Pick<Config, 'mqttTopicPrefix' | 'mqttOrdering'>;

/** CONNACK codes of a broker that does not speak MQTT 5: 3.1.1's "unacceptable protocol version" and 5's "unsupported". */
const UNSUPPORTED_VERSION = new Set([1, 132]);

/** PUBACK reason codes (MQTT 5) no attempt can change: not authorized, topic name invalid, packet too large, payload format invalid. */
const REFUSED = new Set([0x87, 0x90, 0x95, 0x99]);

interface MqttMessage {
  topic: string;
  payload: Buffer;
  id: string;
  traceparent: string | undefined;
}

/**
 * The MQTT sink: QoS 1, not retained, done at PUBACK. mqtt.js keeps unacknowledged QoS 1 messages
 * and sends them again after a reconnect, so one in flight when the connection drops is not lost.
 * MQTT 5 first (content type and user properties); a broker that refuses it is spoken to in 3.1.1.
 */
export function createMqttSink({ settings, url, logger, ackTimeoutMs = DEFAULT_ACK_TIMEOUT_MS, backoff = DEFAULT_BACKOFF }: BusSinkOptions<MqttSettings>) {
  const log = logger.child({ sink: MQTT_SINK });
  const clientId = `boxrelay_${randomBytes(6).toString('hex')}`;
  let client: MqttClient | undefined;
  let version: 5 | 4 = 5;
  let closed = false;

  const start = (link: BusLink): void => {
    const report = oncePerReason((error: Error) => log.warn({ err: error, protocolVersion: version }, 'MQTT unreachable; deliveries wait in the outbox'), (error) => error.message);
    const mqtt = connect(url, {
      protocolVersion: version,
      clientId,
      clean: true,
      reconnectPeriod: backoff.minMs,
      // A refused CONNACK (e.g. not authorized) is tried again too: the work waits in the outbox.
      reconnectOnConnackError: true,
      connectTimeout: ackTimeoutMs,
      keepalive: 30,
    });
    client = mqtt;
    mqtt.on('connect', () => {
      log.info({ protocolVersion: version }, 'MQTT connected');
      link.up();
    });
    mqtt.on('close', () => link.down());
    mqtt.on('error', (error) => {
      if (version === 5 && error instanceof ErrorWithReasonCode && UNSUPPORTED_VERSION.has(error.code) && !closed) {
        log.info('the MQTT broker does not speak MQTT 5; using 3.1.1');
        version = 4;
        mqtt.end(true);
        return start(link);
      }
      report(error);
    });
  };

  return busSink<MqttMessage>({
    name: MQTT_SINK,
    ordering: settings.mqttOrdering,
    // Packet ids are 16 bits; brokers often cap in-flight QoS 1 messages (receive maximum).
    concurrency: 64,
    ackTimeoutMs,
    spanName: (event) => `publish ${[settings.mqttTopicPrefix, ...routingTokens(event)].join('/')}`,
    message: (event, body, traceparent) => ({
      topic: [settings.mqttTopicPrefix, ...routingTokens(event)].join('/'),
      payload: Buffer.from(body),
      id: event.id,
      traceparent,
    }),
    connect: start,
    async publish({ topic, payload, id, traceparent }) {
      if (!client) throw new BusUnavailableError(MQTT_SINK, 'down', 'not connected to MQTT');
      const options: IClientPublishOptions = { qos: 1, retain: false };
      if (version === 5) {
        options.properties = {
          contentType: 'application/cloudevents+json',
          userProperties: { 'ce-id': id, ...(traceparent ? { traceparent } : {}) },
        };
      }
      await client.publishAsync(topic, payload, options);
    },
    classify: (error) => classifyMqtt(error),
    async close() {
      closed = true;
      const mqtt = client;
      client = undefined;
      if (!mqtt) return;
      // Not forced: what is in flight is acknowledged first, within the ack timeout.
      await pTimeout(mqtt.endAsync(false), { milliseconds: ackTimeoutMs, message: false }).catch(() => {});
      await mqtt.endAsync(true).catch(() => {});
    },
  });
}

function classifyMqtt(error: unknown): SinkFailure {
  if (!(error instanceof Error)) return asSinkFailure(error);
  const message = untrusted(error.message, 200);
  if (error instanceof ErrorWithReasonCode && REFUSED.has(error.code)) return new BusRefusedError(MQTT_SINK, 'refused', message);
  return new BusUnavailableError(MQTT_SINK, 'unavailable', message);
}

export const mqttBus: BusDefinition = {
  name: MQTT_SINK,
  url: (config) => config.mqttUrl,
  create: ({ config, url, logger, tuning }) => createMqttSink({ settings: config, url, logger, ...tuning }),
};
