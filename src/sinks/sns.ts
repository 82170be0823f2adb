import { GetTopicAttributesCommand, PublishBatchCommand, SNSClient } from '@aws-sdk/client-sns';
import type { Config } from '../config/schema.js';
import { awsClientConfig, awsMessageBus, type AwsSettings } from './aws.js';
import type { BusDefinition, BusSinkOptions } from './bus.js';
import { DEFAULT_ACK_TIMEOUT_MS } from './bus.js';

export const SNS_SINK = 'sns';

type SnsSettings = AwsSettings & Pick<Config, 'snsOrdering'>;

/** The SNS sink (contract section 20): one message per event, published in batches of 10, done when SNS answered. */
export function createSnsSink({ settings, url: topicArn, logger, ackTimeoutMs = DEFAULT_ACK_TIMEOUT_MS, backoff }: BusSinkOptions<SnsSettings>) {
  const client = new SNSClient(awsClientConfig(settings, ackTimeoutMs));
  return awsMessageBus({
    name: SNS_SINK,
    logger,
    ordering: settings.snsOrdering,
    target: topicArn,
    ackTimeoutMs,
    backoff,
    async sendBatch(messages) {
      const answer = await client.send(
        new PublishBatchCommand({
          TopicArn: topicArn,
          PublishBatchRequestEntries: messages.map((message, index) => ({
            Id: String(index),
            Message: message.body,
            MessageAttributes: message.attributes,
            MessageGroupId: message.groupId,
            MessageDeduplicationId: message.deduplicationId,
          })),
        }),
      );
      return (answer.Failed ?? []).map((failed) => ({ index: Number(failed.Id), code: failed.Code ?? 'failed', message: failed.Message ?? '', senderFault: failed.SenderFault === true }));
    },
    probe: () => client.send(new GetTopicAttributesCommand({ TopicArn: topicArn })),
    close: () => client.destroy(),
  });
}

export const snsBus: BusDefinition = {
  name: SNS_SINK,
  url: (config) => config.snsTopicArn,
  create: ({ config, url, logger, tuning }) => createSnsSink({ settings: config, url, logger, ...tuning }),
};
