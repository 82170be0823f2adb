import { execFile, spawn } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { waitFor } from './fanout.js';

const run = promisify(execFile);

/** Kafka error codes the tests push onto Produce requests (the protocol's numbers). */
export const KAFKA_ERRORS = { UNKNOWN_TOPIC_OR_PARTITION: 3, MESSAGE_TOO_LARGE: 10, TOPIC_AUTHORIZATION_FAILED: 29 } as const;

let built: Promise<string> | undefined;

/** test/support/kafka-mock.c built once per test process; gcc or librdkafka-dev missing fails the test. */
function mockProgram(): Promise<string> {
  built ??= (async () => {
    const binary = join(mkdtempSync(join(tmpdir(), 'boxrelay-kafka-mock-')), 'kafka-mock');
    const source = fileURLToPath(new URL('./kafka-mock.c', import.meta.url));
    await run('gcc', ['-O2', '-Wall', '-o', binary, source, '-lrdkafka']);
    return binary;
  })();
  return built;
}

/** librdkafka's mock cluster (one broker) in its own process, driven by the commands of kafka-mock.c. */
export interface KafkaMock {
  /** The bootstrap address, `127.0.0.1:<port>`. */
  brokers: string;
  createTopic(name: string, partitions: number): Promise<void>;
  /** Connections closed and refused until `up()`. */
  down(): Promise<void>;
  up(): Promise<void>;
  /** The next `count` Produce requests fail with the Kafka error `code`. */
  failProduce(code: number, count?: number): Promise<void>;
  close(): Promise<void>;
}

export async function kafkaMock(): Promise<KafkaMock> {
  const child = spawn(await mockProgram(), [], { stdio: ['pipe', 'pipe', 'inherit'] });
  const exited = new Promise((resolve) => child.once('exit', resolve));
  const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
  const nextLine = async (): Promise<string> => {
    const line = await lines.next();
    if (line.done) throw new Error('the Kafka mock cluster exited');
    return line.value;
  };
  const command = async (text: string): Promise<void> => {
    child.stdin.write(`${text}\n`);
    const answer = await nextLine();
    if (answer !== 'ok') throw new Error(`the Kafka mock cluster answered ${answer} to ${text}`);
  };
  const brokers = await nextLine();
  return {
    brokers,
    createTopic: (name, partitions) => command(`topic ${name} ${partitions}`),
    down: () => command('down'),
    up: () => command('up'),
    failProduce: (code, count = 1) => command(`produce-errors ${code} ${count}`),
    async close() {
      child.stdin.end();
      await exited;
    },
  };
}

/** One record as a consumer sees it (kcat's JSON envelope). */
export interface KafkaRecord {
  partition: number;
  offset: number;
  key: string | null;
  headers: [string, string][];
  value: string;
}

/** Every record of the topic, read from the start by kcat, in partition then offset order. */
export async function topicRecords(brokers: string, topic: string): Promise<KafkaRecord[]> {
  const { stdout } = await run('kcat', ['-C', '-b', brokers, '-t', topic, '-o', 'beginning', '-e', '-q', '-J'], { maxBuffer: 256 * 1024 * 1024, timeout: 30_000 });
  const records = stdout
    .split('\n')
    .filter(Boolean)
    .map((line) => JSON.parse(line) as { partition: number; offset: number; key: string | null; headers?: string[]; payload: string })
    .map(({ partition, offset, key, headers = [], payload }) => ({
      partition,
      offset,
      key,
      headers: Array.from({ length: headers.length / 2 }, (_, i) => [headers[2 * i]!, headers[2 * i + 1]!] as [string, string]),
      value: payload,
    }));
  return records.sort((a, b) => a.partition - b.partition || a.offset - b.offset);
}

/** Waits until the topic holds at least `count` records, and returns them all. */
export function receivedRecords(brokers: string, topic: string, count: number, timeoutMs = 20_000): Promise<KafkaRecord[]> {
  return waitFor(async () => {
    const records = await topicRecords(brokers, topic);
    return records.length >= count ? records : undefined;
  }, `${count} records on ${topic}`, timeoutMs);
}

/** A record's header values by name. */
export const headersOf = (record: KafkaRecord): Record<string, string> => Object.fromEntries(record.headers);

/** The `ce_id` header of each record. */
export const recordIds = (records: KafkaRecord[]): string[] => records.map((record) => headersOf(record).ce_id!);
