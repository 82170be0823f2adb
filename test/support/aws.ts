import { mkdirSync } from 'node:fs';
import { createServer, request as httpRequest } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { join } from 'node:path';
import { CreateQueueCommand, DeleteMessageBatchCommand, ReceiveMessageCommand, SQSClient, type Message } from '@aws-sdk/client-sqs';
import { CreateTopicCommand, SNSClient, SubscribeCommand } from '@aws-sdk/client-sns';
import { CreateBucketCommand, GetObjectCommand, ListObjectsV2Command, S3Client } from '@aws-sdk/client-s3';
import { gunzipSync } from 'node:zlib';
import { ownBroker, uniqueName, type OwnBroker } from './buses.js';
import { afterAll, beforeAll } from 'vitest';
import { waitFor } from './fanout.js';
import { requireBuild, type RelayProcess } from './process.js';

/**
 * The SDK's default credential chain reads these first: fauxqs takes any, and nothing else of the
 * chain (shared files, instance metadata) is asked.
 */
process.env.AWS_ACCESS_KEY_ID ??= 'test';
process.env.AWS_SECRET_ACCESS_KEY ??= 'test';

export const TEST_REGION = 'us-east-1';

/** fauxqs on a free port, started on the project's Node (it needs `node:sqlite`), its state kept in a directory across restarts. */
const FAUXQS = `
import { startFauxqs } from 'fauxqs';
const [port, dataDir] = process.argv.slice(-2);
await startFauxqs({ port: Number(port), logger: false, ...(dataDir === '-' ? {} : { dataDir }) });
`;

export interface OwnFauxqs extends OwnBroker {
  endpoint: string;
  sqs: SQSClient;
  sns: SNSClient;
  s3: S3Client;
  /** A queue of a fresh name (`.fifo` when `fifo`), with its URL. */
  queue(options?: { fifo?: boolean; attributes?: Record<string, string> }): Promise<string>;
  /** A topic of a fresh name, with its ARN. */
  topic(options?: { fifo?: boolean }): Promise<string>;
  /** `queue` subscribed to `topic` with raw delivery (the SNS message's body and attributes as the SQS message's). */
  subscribe(topicArn: string, queueUrl: string): Promise<void>;
  bucket(): Promise<string>;
}

/** fauxqs (SQS, SNS and S3 on one endpoint) as a process of the test's own: `persist` keeps its state across a stop. */
export async function ownFauxqs({ persist = false } = {}): Promise<OwnFauxqs> {
  const own = await ownBroker('http', (port, dir) => {
    const data = join(dir, 'state');
    if (persist) mkdirSync(data, { recursive: true });
    return [process.execPath, ['--no-warnings', '--input-type=module', '-e', FAUXQS, '--', String(port), persist ? data : '-']];
  });
  const endpoint = own.url;
  const config = { endpoint, region: TEST_REGION, credentials: { accessKeyId: 'test', secretAccessKey: 'test' } };
  const sqs = new SQSClient(config);
  const sns = new SNSClient(config);
  const s3 = new S3Client({ ...config, forcePathStyle: true });
  const suffix = (fifo: boolean | undefined) => (fifo ? '.fifo' : '');
  return Object.assign(own, {
    endpoint,
    sqs,
    sns,
    s3,
    async queue({ fifo, attributes = {} }: { fifo?: boolean; attributes?: Record<string, string> } = {}) {
      const created = await sqs.send(
        new CreateQueueCommand({ QueueName: `${uniqueName()}${suffix(fifo)}`, Attributes: { ...(fifo ? { FifoQueue: 'true' } : {}), ...attributes } }),
      );
      return created.QueueUrl!;
    },
    async topic({ fifo }: { fifo?: boolean } = {}) {
      const created = await sns.send(new CreateTopicCommand({ Name: `${uniqueName()}${suffix(fifo)}`, Attributes: fifo ? { FifoTopic: 'true' } : {} }));
      return created.TopicArn!;
    },
    async subscribe(topicArn: string, queueUrl: string) {
      const arn = `arn:aws:sqs:${TEST_REGION}:000000000000:${queueUrl.split('/').pop()}`;
      await sns.send(new SubscribeCommand({ TopicArn: topicArn, Protocol: 'sqs', Endpoint: arn, Attributes: { RawMessageDelivery: 'true' } }));
    },
    async bucket() {
      const name = uniqueName();
      await s3.send(new CreateBucketCommand({ Bucket: name }));
      return name;
    },
  });
}

/** Receives (and deletes) messages of a queue until `count` came, in the order the queue gave them. */
export async function receiveAll(sqs: SQSClient, queueUrl: string, count: number, timeoutMs = 20_000): Promise<Message[]> {
  const received: Message[] = [];
  await waitFor(
    async () => {
      const answer = await sqs.send(new ReceiveMessageCommand({ QueueUrl: queueUrl, MaxNumberOfMessages: 10, MessageAttributeNames: ['All'], MessageSystemAttributeNames: ['All'], WaitTimeSeconds: 0 }));
      const messages = answer.Messages ?? [];
      received.push(...messages);
      if (messages.length > 0) {
        await sqs.send(new DeleteMessageBatchCommand({ QueueUrl: queueUrl, Entries: messages.map((m, i) => ({ Id: String(i), ReceiptHandle: m.ReceiptHandle! })) }));
      }
      return received.length >= count;
    },
    `${count} messages on ${queueUrl} (have ${received.length})`,
    timeoutMs,
  );
  return received;
}

/** A message's string attributes, by name. */
export function attributesOf(message: Message): Record<string, string> {
  return Object.fromEntries(Object.entries(message.MessageAttributes ?? {}).map(([name, value]) => [name, value.StringValue ?? '']));
}

/** Every object of a bucket (key order), each with its lines parsed. */
export async function archiveObjects(s3: S3Client, bucket: string): Promise<{ key: string; events: { id: string; time: string; type: string }[] }[]> {
  const listed = await s3.send(new ListObjectsV2Command({ Bucket: bucket }));
  const objects = [];
  for (const { Key } of listed.Contents ?? []) {
    const object = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: Key! }));
    const text = gunzipSync(Buffer.from(await object.Body!.transformToByteArray())).toString('utf8');
    objects.push({ key: Key!, events: text.split('\n').filter(Boolean).map((line) => JSON.parse(line)) });
  }
  return objects;
}

export interface HeldPutProxy {
  endpoint: string;
  /** Resolves with the key of the first object PUT once S3 has it; its answer never reaches the client. */
  written: Promise<string>;
  close(): Promise<void>;
}

/**
 * A reverse proxy in front of fauxqs: every request passes, except that the first PUT of an object
 * is forwarded and answered by S3 but its answer is held back, as when a process dies right after
 * S3 wrote the object and before it heard so.
 */
export async function heldPutProxy(upstream: string): Promise<HeldPutProxy> {
  const target = new URL(upstream);
  let wrote!: (key: string) => void;
  const written = new Promise<string>((resolve) => (wrote = resolve));
  let held = false;
  const sockets = new Set<Socket>();
  const server = createServer((req, res) => {
    const holding = req.method === 'PUT' && !held;
    if (holding) held = true;
    const headers = { ...req.headers };
    // The proxy answers 100-continue itself (node's default); the upstream gets the body at once.
    delete headers.expect;
    const forwarded = httpRequest({ host: target.hostname, port: target.port, path: req.url, method: req.method, headers }, (answer) => {
      if (!holding) {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        return void answer.pipe(res);
      }
      answer.resume();
      answer.on('end', () => wrote(decodeURIComponent(new URL(req.url ?? '', upstream).pathname.split('/').slice(2).join('/'))));
    });
    forwarded.on('error', () => res.writeHead(502).end());
    req.pipe(forwarded);
  });
  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    endpoint: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    written,
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

/** The relay's `/readyz` answers 200 with its S3 archive reachable. */
export async function s3Ready(relay: RelayProcess): Promise<boolean> {
  const res = await fetch(`http://127.0.0.1:${relay.internalPort}/readyz`).catch(() => undefined);
  return res?.status === 200 && ((await res.json()) as { checks: { s3: string } }).checks.s3 === 'ok';
}

/** A fauxqs of the test file's own, started (after checking the build) before its tests and stopped after them. */
export function fauxqsForFile(): () => OwnFauxqs {
  let aws: OwnFauxqs | undefined;
  beforeAll(async () => {
    requireBuild();
    aws = await ownFauxqs();
  });
  afterAll(() => aws?.stop());
  return () => aws as OwnFauxqs;
}
