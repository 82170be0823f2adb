import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { gzip } from 'node:zlib';
import { ListObjectsV2Command, PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import type { Clock } from '../clock.js';
import type { Config } from '../config/schema.js';
import type { DependencyStatus } from '../dependency-status.js';
import { describeError } from '../errors.js';
import type { CloudEvent } from '../events/cloudevent.js';
import { oncePerReason, untrusted } from '../log.js';
import { nodeTimers } from '../schedule.js';
import { awsClientConfig, awsStatusOf, classifyAws, prober, type AwsSettings } from './aws.js';
import { BUS_MAX_ATTEMPTS, BUS_PAUSE_AFTER_MS, DEFAULT_ACK_TIMEOUT_MS, DEFAULT_BACKOFF, type Bus, type BusDefinition, type BusSinkOptions } from './bus.js';
import { BusDownError, BusRefusedError, eventJson } from './failures.js';

export const S3_SINK = 's3';

type S3Settings = AwsSettings & Pick<Config, 's3ArchiveMaxEvents' | 's3ArchiveMaxAge'>;

const gzipped = promisify(gzip);

/** How long past its age an object's write may be retried before its events fall back to the relay's retries. */
const PUT_WINDOW_MS = 60_000;

/** `s3://bucket/prefix` as its bucket and key prefix (no slashes at either end). */
export function parseArchive(archive: string): { bucket: string; prefix: string } {
  const [bucket = '', ...rest] = archive.replace(/^s3:\/\//, '').split('/');
  return { bucket, prefix: rest.filter(Boolean).join('/') };
}

/** An event id as a key's last part: characters a key, a shell or a URL would treat specially become `_`. */
const keyPart = (id: string): string => id.replace(/[^A-Za-z0-9._-]/g, '_');

/** `<prefix>/<yyyy>/<mm>/<dd>/<HH>/`: the hour (UTC) of an event's `time`. */
export function hourPrefix(prefix: string, time: string): string {
  const at = new Date(time);
  const hour = Number.isNaN(at.getTime()) ? new Date(0) : at;
  const path = hour.toISOString().slice(0, 13).replace(/[-T]/g, '/');
  return prefix ? `${prefix}/${path}/` : `${path}/`;
}

/** The key of an object whose first event is `first` (contract section 20); `suffix` for an object of retried or replayed events. */
export function archiveKey(prefix: string, first: CloudEvent, suffix = ''): string {
  return `${hourPrefix(prefix, first.time)}${keyPart(first.id)}${suffix}.ndjson.gz`;
}

interface Waiting {
  event: CloudEvent;
  line: string;
  resolve(): void;
  reject(error: unknown): void;
}

interface Batch {
  entries: Waiting[];
  /** Events of outbox rows (retries, replays): written under a fresh key, never over an object. */
  fromOutbox: boolean;
  /** On the relay's clock. */
  startedAt: number;
  /** Ends the wait for its age: written now. */
  timer?: unknown;
  /** A stop's cut: the write is abandoned, and its events are read from the log again by the next process. */
  cut: AbortSignal;
  /** Stops listening for the cut. */
  forget?: () => void;
}

/**
 * The S3 archive: the events read from the delivery log, in the order the lane starts them, go into
 * gzip NDJSON objects of up to `s3ArchiveMaxEvents` events, written when full or when the first has
 * waited `s3ArchiveMaxAge`; each event is delivered when the object holding it is written. One object
 * is written at a time, so a crash leaves the log's cursors before the first event of the object
 * whose write was not yet written down, and the next process forms that object again from the same
 * first event: the same key, with at least the same events. After a start, an object about to be
 * written is cut before any event that already begins an object (a later object the crashed process
 * wrote before its cursors were stored), so no event lands in two objects. A failed write is retried
 * here, as a whole, with the sink down meanwhile; events of outbox rows go to objects of their own
 * under a suffixed key.
 */
export function createS3Archive({
  settings,
  url: archive,
  logger,
  clock,
  ackTimeoutMs = DEFAULT_ACK_TIMEOUT_MS,
  backoff = DEFAULT_BACKOFF,
  timers = nodeTimers,
}: BusSinkOptions<S3Settings> & { clock: Clock }): Bus {
  const log = logger.child({ sink: S3_SINK });
  const { bucket, prefix } = parseArchive(archive);
  // A custom endpoint (LocalStack, MinIO, a VPC endpoint) is addressed path-style.
  const client = new S3Client({ ...awsClientConfig(settings, ackTimeoutMs), forcePathStyle: settings.awsEndpoint !== undefined });
  const maxEvents = settings.s3ArchiveMaxEvents;
  const maxAgeMs = settings.s3ArchiveMaxAge;
  const stopping = new AbortController();
  const listeners = new Set<() => void>();
  let status: DependencyStatus = { state: 'down' };
  /** Until an object is written without cutting: objects a crashed process wrote may follow the one formed again. */
  let recovering = true;
  const forming: Record<'log' | 'outbox', Batch | undefined> = { log: undefined, outbox: undefined };
  /** Writes one after the other (see above). */
  let writing: Promise<void> = Promise.resolve();
  const report = oncePerReason((error: unknown) => log.warn({ err: error, bucket }, 'S3 unreachable; the archive waits'), describeError);

  const up = () => {
    status = { state: 'ok' };
    for (const listener of listeners) listener();
  };

  const probeUntilUp = prober({
    probe: () => client.send(new ListObjectsV2Command({ Bucket: bucket, Prefix: prefix ? `${prefix}/` : undefined, MaxKeys: 1 })),
    stopping: stopping.signal,
    backoff,
    down(error) {
      report(error);
      status = { state: 'down', error: untrusted(describeError(error), 200) };
    },
    up() {
      log.info({ bucket, prefix }, 'S3 archive reachable');
      up();
    },
  });

  /** The event ids that begin an object in the hours of `entries` (read while recovering). */
  const firstsOfObjects = async (entries: Waiting[]): Promise<Set<string>> => {
    const firsts = new Set<string>();
    for (const hour of new Set(entries.map(({ event }) => hourPrefix(prefix, event.time)))) {
      let token: string | undefined;
      do {
        const page = await client.send(new ListObjectsV2Command({ Bucket: bucket, Prefix: hour, ContinuationToken: token }));
        for (const { Key } of page.Contents ?? []) if (Key?.endsWith('.ndjson.gz')) firsts.add(Key.slice(hour.length, -'.ndjson.gz'.length));
        token = page.NextContinuationToken;
      } while (token);
    }
    return firsts;
  };

  const put = async (key: string, entries: Waiting[], cut: AbortSignal): Promise<void> => {
    const body = await gzipped(entries.map(({ line }) => line).join('\n') + '\n');
    await client.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: body, ContentType: 'application/x-ndjson', ContentEncoding: 'gzip' }), { abortSignal: cut });
  };

  /** Writes a batch, retrying while S3 is down or failing on its side, until its window ends. */
  const write = async (batch: Batch): Promise<void> => {
    let { entries } = batch;
    const deadline = batch.startedAt + maxAgeMs + PUT_WINDOW_MS;
    for (let failures = 0; entries.length > 0; ) {
      try {
        let rest: Waiting[] = [];
        if (!batch.fromOutbox && recovering) {
          const firsts = await firstsOfObjects(entries);
          const cut = entries.findIndex(({ event }, i) => i > 0 && firsts.has(keyPart(event.id)));
          if (cut > 0) [entries, rest] = [entries.slice(0, cut), entries.slice(cut)];
          else recovering = false;
        }
        const suffix = batch.fromOutbox ? `-replay-${clock.now().toString(36)}${randomBytes(3).toString('hex')}` : '';
        await put(archiveKey(prefix, entries[0]!.event, suffix), entries, batch.cut);
        for (const entry of entries) entry.resolve();
        entries = rest;
        failures = 0;
      } catch (error) {
        const failure = classifyAws(S3_SINK, error);
        if (failure instanceof BusRefusedError || stopping.signal.aborted || batch.cut.aborted || clock.now() > deadline) {
          for (const entry of entries) entry.reject(failure);
          return;
        }
        if (awsStatusOf(error) === undefined) {
          report(error);
          status = { state: 'down', error: failure.message };
        }
        await sleep(Math.min(backoff.maxMs, backoff.minMs * 2 ** failures++), undefined, { signal: stopping.signal }).catch(() => {});
        if (status.state !== 'ok') void probeUntilUp();
      }
    }
  };

  const flush = (kind: 'log' | 'outbox'): void => {
    const batch = forming[kind];
    if (!batch) return;
    forming[kind] = undefined;
    timers.clearTimeout(batch.timer);
    batch.forget?.();
    writing = writing.then(() => write(batch));
  };

  return {
    name: S3_SINK,
    // A whole object's events under way, and the next one's gathering while it is written: the lane
    // claims again only once a good part of its room is free, so with room for one object alone the
    // last few events of each would wait for its age.
    concurrency: 2 * maxEvents,
    maxAttempts: BUS_MAX_ATTEMPTS,
    pauseAfterMs: BUS_PAUSE_AFTER_MS,
    attemptTimeoutMs: maxAgeMs + PUT_WINDOW_MS + ackTimeoutMs,
    ordering: 'none',
    spanKind: 'producer',
    spanName: () => `archive s3://${bucket}`,
    start: () => void probeUntilUp(),
    check: () => status,
    up: () => status.state === 'ok',
    onUp: (listener) => void listeners.add(listener),
    deliver(event, signal, context) {
      if (status.state !== 'ok') return Promise.reject(new BusDownError(S3_SINK));
      const line = eventJson(event);
      const kind = context?.fromOutbox ? 'outbox' : 'log';
      return new Promise<void>((resolve, reject) => {
        let batch = forming[kind];
        if (!batch) {
          const started: Batch = { entries: [], fromOutbox: kind === 'outbox', startedAt: clock.now(), cut: signal };
          const due = () => forming[kind] === started && flush(kind);
          started.timer = timers.setTimeout(async () => void due(), maxAgeMs);
          // Cut by a stop: what is held is written now, not after its age.
          signal.addEventListener('abort', due, { once: true });
          started.forget = () => signal.removeEventListener('abort', due);
          batch = forming[kind] = started;
        }
        batch.entries.push({ event, line, resolve, reject });
        if (batch.entries.length >= maxEvents) flush(kind);
      });
    },
    async close() {
      flush('log');
      flush('outbox');
      const written = writing;
      await Promise.race([written, sleep(ackTimeoutMs)]);
      stopping.abort();
      status = { state: 'down' };
      client.destroy();
    },
  };
}

export const s3Archive: BusDefinition = {
  name: S3_SINK,
  url: (config) => config.s3Archive,
  create: ({ config, url, logger, clock, tuning }) => createS3Archive({ settings: config, url, logger, clock, ...tuning }),
};

