import { setTimeout as sleep } from 'node:timers/promises';
import pTimeout from 'p-timeout';
import type { Config } from '../config/schema.js';
import { describeError, type BusName } from '../errors.js';
import { groupCommit, type Outcome } from '../group-commit.js';
import { receiverId, type CloudEvent } from '../events/cloudevent.js';
import { oncePerReason, untrusted, type Logger } from '../log.js';
import { busSink, type Bus, type BusLink, DEFAULT_ACK_TIMEOUT_MS, DEFAULT_BACKOFF, type BusTuning } from './bus.js';
import { BusRefusedError, BusUnavailableError, SinkFailure, asSinkFailure } from './failures.js';

export type AwsSettings = Pick<Config, 'awsRegion' | 'awsEndpoint'>;

/** The region when neither BOXRELAY_AWS_REGION nor AWS_REGION is set (contract section 20). */
export const DEFAULT_AWS_REGION = 'us-east-1';

/** Publishes awaiting SQS or SNS at once: each batch request is one keep-alive connection. */
const AWS_CONCURRENCY = 256;

/**
 * The client settings the three AWS sinks share. Credentials are the SDK's default chain, never the
 * relay's own. The SDK tries a request twice at most: the relay retries on its own schedule, and a
 * down endpoint must fail an attempt within the sink's answer timeout, not hold its lane.
 */
export function awsClientConfig(settings: AwsSettings, ackTimeoutMs: number) {
  const agent = { keepAlive: true, maxSockets: AWS_CONCURRENCY };
  return {
    region: settings.awsRegion ?? DEFAULT_AWS_REGION,
    ...(settings.awsEndpoint ? { endpoint: settings.awsEndpoint } : {}),
    maxAttempts: 2,
    requestHandler: {
      connectionTimeout: Math.min(1000, ackTimeoutMs),
      requestTimeout: ackTimeoutMs,
      throwOnRequestTimeout: true,
      httpAgent: agent,
      httpsAgent: agent,
    },
  };
}

/** What an AWS SDK error carries: its name (the service's error code), fault side and HTTP status. */
interface AwsServiceError {
  name: string;
  message: string;
  $fault?: 'client' | 'server';
  $metadata?: { httpStatusCode?: number };
}

/** Client-side answers that another attempt can change: throttling and expired or skewed signatures. */
const RETRIED_CODES = new Set([
  'Throttling',
  'ThrottlingException',
  'ThrottledException',
  'RequestThrottled',
  'RequestThrottledException',
  'TooManyRequestsException',
  'RequestLimitExceeded',
  'SlowDown',
  'KMSThrottlingException',
  'KmsThrottled',
  'RequestTimeout',
  'RequestTimeoutException',
  'RequestExpired',
  'RequestTimeTooSkewed',
  'ExpiredToken',
  'ExpiredTokenException',
]);

/** The service's answer, or undefined when none came (unreachable, timed out, no credentials). */
export function awsStatusOf(error: unknown): number | undefined {
  return (error as AwsServiceError | undefined)?.$metadata?.httpStatusCode;
}

/**
 * A failure of an AWS request: refused for good when the service answered that the request is wrong
 * (a missing queue, topic or bucket, no rights, a message over the limit), retried when it throttled,
 * failed on its side, or did not answer.
 */
export function classifyAws(sink: BusName, error: unknown): SinkFailure {
  if (!(error instanceof Error) || error instanceof SinkFailure) return asSinkFailure(error);
  const status = awsStatusOf(error);
  const message = untrusted(describeError(error), 200);
  if (status !== undefined && status >= 400 && status < 500 && status !== 429 && !RETRIED_CODES.has(error.name)) {
    return new BusRefusedError(sink, codeOf(error.name), message);
  }
  return new BusUnavailableError(sink, status === undefined ? 'unreachable' : 'unavailable', message);
}

/** A service error code as a failure code: `sqs_queue_does_not_exist`, `sns_not_found`, `s3_no_such_bucket`. */
export function codeOf(name: string): string {
  const words = name
    .replace(/^AWS\.SimpleQueueService\./, '')
    .replace(/([a-z0-9])([A-Z])/g, '$1_$2')
    .toLowerCase()
    .replace(/[^a-z0-9_]+/g, '_');
  return words || 'refused';
}

/** The body and attributes of one SQS or SNS message (contract section 20), and where it goes in a FIFO queue or topic. */
export interface AwsMessage {
  body: string;
  attributes: Record<string, { DataType: 'String'; StringValue: string }>;
  /** Present for a FIFO queue or topic: the box id (`_` without one). */
  groupId?: string;
  /** Present for a FIFO queue or topic: the event id. */
  deduplicationId?: string;
  bytes: number;
}

/** An entry of one batch request's answer that the service did not take. */
export interface AwsEntryFailure {
  index: number;
  code: string;
  message: string;
  senderFault: boolean;
}

/** The group of an event without a box in a FIFO queue or topic. */
const NO_BOX_GROUP = '_';

/** The message of an event: the CloudEvent JSON, its attributes, and its FIFO ids when `fifo`. */
export function awsMessage(event: CloudEvent, body: string, traceparent: string | undefined, fifo: boolean): AwsMessage {
  const attributes: AwsMessage['attributes'] = {
    ce_id: { DataType: 'String', StringValue: event.id },
    ce_type: { DataType: 'String', StringValue: event.type },
    ce_boxrelayaccount: { DataType: 'String', StringValue: event.boxrelayaccount },
    'content-type': { DataType: 'String', StringValue: 'application/cloudevents+json' },
  };
  if (event.subject) attributes.ce_subject = { DataType: 'String', StringValue: event.subject };
  if (traceparent) attributes.traceparent = { DataType: 'String', StringValue: traceparent };
  let bytes = Buffer.byteLength(body);
  for (const [name, { StringValue }] of Object.entries(attributes)) bytes += Buffer.byteLength(name) + 'String'.length + Buffer.byteLength(StringValue);
  return fifo ? { body, attributes, groupId: event.subject || NO_BOX_GROUP, deduplicationId: receiverId(event), bytes } : { body, attributes, bytes };
}

/**
 * Probes until the service answers anything (a refusal too: the endpoint is there), telling `down`
 * each failure to answer, then `up`. Calls while a probe runs join it.
 */
export function prober({ probe, stopping, backoff, down, up }: { probe(): Promise<unknown>; stopping: AbortSignal; backoff: { minMs: number; maxMs: number }; down(error: unknown): void; up(): void }) {
  let probing = false;
  return async (): Promise<void> => {
    if (probing) return;
    probing = true;
    try {
      for (let failures = 0; !stopping.aborted; failures++) {
        try {
          await probe();
        } catch (error) {
          const status = awsStatusOf(error);
          if (status === undefined || status >= 500) {
            down(error);
            await sleep(Math.min(backoff.maxMs, backoff.minMs * 2 ** failures), undefined, { signal: stopping }).catch(() => {});
            continue;
          }
        }
        if (!stopping.aborted) up();
        return;
      }
    } finally {
      probing = false;
    }
  };
}

/** A batch request holds at most 10 entries, and at most this many bytes (SNS's limit; SQS takes more). */
const BATCH_ENTRIES = 10;
const BATCH_BYTES = 256 * 1024;

export interface AwsBusOptions extends BusTuning {
  name: BusName;
  logger: Logger;
  ordering: 'none' | 'per-box';
  /** The queue URL or topic ARN, for spans and logs. */
  target: string;
  /** One batch request; resolves with the entries the service did not take. */
  sendBatch(messages: AwsMessage[]): Promise<AwsEntryFailure[]>;
  /** Any request to the service: an answer of any kind (even a refusal) shows the endpoint is reachable. */
  probe(): Promise<unknown>;
  close(): void;
}

/**
 * SQS or SNS as a bus: the messages of one turn go in batch requests of 10 (the SDK's cost is per
 * request), and an entry the service does not take fails alone. A request that got no answer marks
 * the sink down until a probe is answered, so nothing is claimed for it meanwhile.
 */
export function awsMessageBus(options: AwsBusOptions): Bus {
  const { name, ackTimeoutMs = DEFAULT_ACK_TIMEOUT_MS, backoff = DEFAULT_BACKOFF } = options;
  const log = options.logger.child({ sink: name });
  const fifo = options.target.endsWith('.fifo');
  const stopping = new AbortController();
  let link: BusLink | undefined;
  const report = oncePerReason((error: unknown) => log.warn({ err: error, target: options.target }, `${name} unreachable; deliveries wait in the outbox`), describeError);

  const probeUntilUp = prober({
    probe: options.probe,
    stopping: stopping.signal,
    backoff,
    down(error) {
      report(error);
      link?.down(untrusted(describeError(error), 200));
    },
    up() {
      log.info({ target: options.target }, `${name} reachable`);
      link?.up();
    },
  });

  const send = async (batch: AwsMessage[]): Promise<Outcome<void>[]> => {
    try {
      const failed = await options.sendBatch(batch);
      const failures = new Map(failed.map((failure) => [failure.index, failure]));
      return batch.map((_, index) => {
        const failure = failures.get(index);
        if (!failure) return { value: undefined };
        const reason = untrusted(`${failure.code}: ${failure.message}`, 200);
        return { error: failure.senderFault ? new BusRefusedError(name, codeOf(failure.code), reason) : new BusUnavailableError(name, 'unavailable', reason) };
      });
    } catch (error) {
      // A request refused as a whole (one entry too large makes the batch too long) is sent again entry by entry.
      if (batch.length > 1 && classifyAws(name, error) instanceof BusRefusedError) return (await Promise.all(batch.map((entry) => send([entry]).catch((failure: unknown) => [{ error: failure }])))).flat();
      throw error;
    }
  };
  // The messages published in one turn go in one request (a client's cost is mostly per request), any number of requests under way.
  const batches = groupCommit<AwsMessage, void>({ commit: send, concurrency: Infinity, bytesOf: (message) => message.bytes, maxBytes: BATCH_BYTES, maxItems: BATCH_ENTRIES });

  return busSink<AwsMessage>({
    name,
    // A FIFO queue or topic keeps a box's messages in the order it is handed them (contract section
    // 20): handed over one at a time per box, whatever *_ORDERING says, or a retry lands after a newer one.
    ordering: fifo ? 'per-box' : options.ordering,
    concurrency: AWS_CONCURRENCY,
    ackTimeoutMs,
    spanName: () => `publish ${options.target}`,
    message: (event, body, traceparent) => awsMessage(event, body, traceparent, fifo),
    connect(busLink) {
      link = busLink;
      void probeUntilUp();
    },
    publish: (message) => batches.add(message),
    classify(error) {
      const failure = classifyAws(name, error);
      // No answer at all (an entry the service failed did answer): the endpoint is probed until it answers.
      if (!(error instanceof SinkFailure) && awsStatusOf(error) === undefined && !stopping.signal.aborted) {
        link?.down(failure.message);
        void probeUntilUp();
      }
      return failure;
    },
    async close() {
      stopping.abort();
      // What is under way may finish within the ack timeout.
      await pTimeout(batches.flush(), { milliseconds: ackTimeoutMs, message: false });
      options.close();
    },
  });
}
