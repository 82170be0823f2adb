import { GetQueueAttributesCommand, SendMessageBatchCommand, SQSClient } from '@aws-sdk/client-sqs';
import type { Config } from '../config/schema.js';
import { awsClientConfig, awsMessageBus, type AwsSettings } from './aws.js';
import type { BusDefinition, BusSinkOptions } from './bus.js';
import { DEFAULT_ACK_TIMEOUT_MS } from './bus.js';

export const SQS_SINK = 'sqs';

type SqsSettings = AwsSettings & Pick<Config, 'sqsOrdering'>;

/** The SQS sink (contract section 20): one message per event, sent in batches of 10, done when SQS answered. */
export function createSqsSink({ settings, url: queueUrl, logger, ackTimeoutMs = DEFAULT_ACK_TIMEOUT_MS, backoff }: BusSinkOptions<SqsSettings>) {
  const client = new SQSClient(awsClientConfig(settings, ackTimeoutMs));
  return awsMessageBus({
    name: SQS_SINK,
    logger,
    ordering: settings.sqsOrdering,
    target: queueUrl,
    ackTimeoutMs,
    backoff,
    async sendBatch(messages) {
      const answer = await client.send(
        new SendMessageBatchCommand({
          QueueUrl: queueUrl,
          Entries: messages.map((message, index) => ({
            Id: String(index),
            MessageBody: message.body,
            MessageAttributes: message.attributes,
            MessageGroupId: message.groupId,
            MessageDeduplicationId: message.deduplicationId,
          })),
        }),
      );
      return (answer.Failed ?? []).map((failed) => ({ index: Number(failed.Id), code: failed.Code ?? 'failed', message: failed.Message ?? '', senderFault: failed.SenderFault === true }));
    },
    probe: () => client.send(new GetQueueAttributesCommand({ QueueUrl: queueUrl, AttributeNames: ['QueueArn'] })),
    close: () => client.destroy(),
  });
}

export const sqsBus: BusDefinition = {
  name: SQS_SINK,
  url: (config) => config.sqsQueueUrl,
  create: ({ config, url, logger, tuning }) => createSqsSink({ settings: config, url, logger, ...tuning }),
};
