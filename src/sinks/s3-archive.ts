import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { gzip } from 'node:zlib';
import { ListObjectsV2Command, PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import type { Clock } from '../clock.js';
import type { Config } from '../config/schema.js';
import type { DependencyStatus } from '../dependency-status.js';
import type { ArchiveLedger } from '../store/archive/ledger.js';
import type { HeldAs } from '../store/exceptions/claims.js';
import { describeError } from '../errors.js';
import { receiverId, type CloudEvent } from '../events/cloudevent.js';
import { oncePerReason, untrusted } from '../log.js';
import { nodeTimers } from '../schedule.js';
import { awsClientConfig, awsStatusOf, classifyAws, prober, type AwsSettings } from './aws.js';
import { BUS_MAX_ATTEMPTS, BUS_PAUSE_AFTER_MS, DEFAULT_ACK_TIMEOUT_MS, DEFAULT_BACKOFF, type Bus, type BusDefinition, type BusSinkOptions } from './bus.js';
import { ArchiveFencedError, BusDownError, BusRefusedError, eventJson } from './failures.js';

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

/**
 * The key of an object whose first event is `first` (contract section 20); `suffix` for an object of
 * retried or replayed events. The event is named as receivers dedupe it: `<account>:<id>` for an
 * account other than `default` (contract section 21), so two accounts' events of one id never share a key.
 */
export function archiveKey(prefix: string, first: CloudEvent, suffix = ''): string {
  return `${hourPrefix(prefix, first.time)}${keyPart(receiverId(first))}${suffix}.ndjson.gz`;
}

interface Waiting {
  event: CloudEvent;
  line: string;
  /** Its name in the ledger: the event as receivers dedupe it (`receiverId`), or for an outbox row's event the row's version of it. */
  item: string;
  heldAs: HeldAs | undefined;
  /** The first event of an outbox object names it by its row and version: the same content never under a second key. */
  suffix: string;
  /** The gate, asked immediately before the object holding it leaves: throws the refusal when it may not (see AttemptContext.holding). */
  holding: () => void;
  /** When it came, on the relay's clock: the age of an object is its first event's. */
  at: number;
  /** A stop's cut: the write is abandoned, and its events are read from the log again by the next process. */
  cut: AbortSignal;
  /** Answered (resolved or rejected): a write tried again leaves it out. */
  done: boolean;
  resolve(): void;
  reject(error: unknown): void;
}

type Kind = 'log' | 'outbox';
const KINDS: readonly Kind[] = ['log', 'outbox'];

/** The events of one kind waiting for an object, in the order they came. */
interface Gathering {
  entries: Waiting[];
  /** The first entry has waited its age (or a stop cut it): what is gathered is written now. */
  due: boolean;
  /** Ends the wait for the first entry's age. */
  timer?: unknown;
  /** Stops listening for the cut. */
  forget?: () => void;
}

/**
 * The S3 archive: the events read from the delivery log, in the order the lane starts them, go into
 * gzip NDJSON objects of up to `s3ArchiveMaxEvents` events, written when full or when the first has
 * waited `s3ArchiveMaxAge`; each event is delivered when the object holding it is written. One object
 * is written at a time, so a crash leaves the log's cursors before the first event of the object
 * whose write was not yet written down, and the next process forms that object again from the same
 * first event: the same key, with at least the same events. After a start, objects are cut before
 * any event that already begins an object (one the crashed process wrote before its cursors were
 * stored), and the events from the cut on wait for the next object, which so begins where the
 * crashed process's did and gathers as many events as it had gathered: no event lands in two objects and no
 * object is written again with fewer. That lasts until an object is written under a key no object
 * had: past what the crashed process wrote. A failed write is retried here, as a whole, with the
 * sink down meanwhile; events of outbox rows go to objects of their own under a suffixed key.
 */
export function createS3Archive({
  settings,
  url: archive,
  logger,
  clock,
  ackTimeoutMs = DEFAULT_ACK_TIMEOUT_MS,
  backoff = DEFAULT_BACKOFF,
  timers = nodeTimers,
  archive: ledger,
}: BusSinkOptions<S3Settings> & { clock: Clock; archive: ArchiveLedger }): Bus {
  const log = logger.child({ sink: S3_SINK });
  const { bucket, prefix } = parseArchive(archive);
  // A custom endpoint (LocalStack, MinIO, a VPC endpoint) is addressed path-style.
  const client = new S3Client({ ...awsClientConfig(settings, ackTimeoutMs), forcePathStyle: settings.awsEndpoint !== undefined });
  const maxEvents = settings.s3ArchiveMaxEvents;
  const maxAgeMs = settings.s3ArchiveMaxAge;
  const stopping = new AbortController();
  const listeners = new Set<() => void>();
  let status: DependencyStatus = { state: 'down' };
  /** Until an object is written under a new key without cutting: objects a crashed process wrote may follow the ones formed again. */
  let recovering = true;
  const gathering: Record<Kind, Gathering> = { log: { entries: [], due: false }, outbox: { entries: [], due: false } };
  /** The writer, while it runs: objects are written one after the other (see above). */
  let writing: Promise<void> | undefined;
  let closing = false;
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

  const put = async (key: string, body: Uint8Array, cut: AbortSignal): Promise<void> => {
    await client.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: body, ContentType: 'application/x-ndjson', ContentEncoding: 'gzip' }), { abortSignal: cut });
  };

  /** The entries the gate lets go now; each refused one is answered with its refusal (its attempt says why: lost, paused, stale). */
  const admitted = (entries: Waiting[]): Waiting[] =>
    entries.filter((entry) => {
      try {
        entry.holding();
        return true;
      } catch (refusal) {
        entry.reject(refusal);
        return false;
      }
    });

  /**
   * Records the object in the ledger, then writes it: the gate asked before each step, so a replica
   * that no longer holds an event records and writes nothing with it. An object already recorded for
   * some of the entries (a crashed, stalled or stopped writer's) is written from its recorded bytes,
   * and those entries are delivered with it; the rest go back to be gathered again. Returns the
   * entries not answered here.
   */
  const recordAndPut = async (kind: Kind, entries: Waiting[]): Promise<Waiting[]> => {
    const going = admitted(entries);
    const first = going[0];
    if (!first) return [];
    const body = await gzipped(going.map(({ line }) => line).join('\n') + '\n');
    const key = archiveKey(prefix, first.event, kind === 'outbox' ? first.suffix : '');
    const recorded = await ledger.record({ sink: S3_SINK, key, body: body.toString('base64'), items: going.map(({ item, heldAs }) => ({ item, heldAs })), now: clock.now() });
    if (!recorded.recorded) {
      const archived = new Set<string>();
      for (const other of recorded.elsewhere) {
        if (other.body !== null) {
          await put(other.key, Buffer.from(other.body, 'base64'), first.cut);
          await ledger.written(other.key, clock.now());
        }
        other.items.forEach((item) => archived.add(item));
      }
      const fenced = new Set(recorded.fenced);
      for (const entry of going) {
        if (archived.has(entry.item)) entry.resolve();
        else if (fenced.has(entry.item)) entry.reject(new ArchiveFencedError());
      }
      return going.filter(({ item }) => !archived.has(item) && !fenced.has(item));
    }
    // Recorded: written now, or (refused at the last moment) by whoever meets its events next.
    const still = admitted(going);
    if (still.length < going.length) return still;
    await put(key, body, first.cut);
    await ledger.written(key, clock.now());
    for (const entry of going) entry.resolve();
    return [];
  };

  /** Waits for the first entry's age, or a stop's cut, then has what is gathered written. */
  const watch = (kind: Kind): void => {
    const gathered = gathering[kind];
    const first = gathered.entries[0];
    if (!first || gathered.forget) return;
    const due = () => {
      gathered.due = true;
      void writeDue();
    };
    gathered.timer = timers.setTimeout(async () => due(), Math.max(0, first.at + maxAgeMs - clock.now()));
    // Cut by a stop: what is gathered is written now, not after its age.
    first.cut.addEventListener('abort', due, { once: true });
    gathered.forget = () => {
      timers.clearTimeout(gathered.timer);
      first.cut.removeEventListener('abort', due);
      gathered.forget = undefined;
    };
    if (first.cut.aborted) due();
  };

  /** An object of that kind can be written: a full one is gathered, or the first gathered has waited its age. */
  const ready = (kind: Kind): boolean => gathering[kind].entries.length >= maxEvents || (gathering[kind].entries.length > 0 && (gathering[kind].due || closing));

  /** The next object's events: of the kind whose first waits the longest, a full object's or all gathered. */
  const nextObject = (): { kind: Kind; entries: Waiting[] } | undefined => {
    const kinds = KINDS.filter(ready).sort((a, b) => gathering[a].entries[0]!.at - gathering[b].entries[0]!.at);
    const kind = kinds[0];
    if (!kind) return undefined;
    const gathered = gathering[kind];
    gathered.forget?.();
    gathered.due = false;
    const entries = gathered.entries.splice(0, maxEvents);
    watch(kind);
    return { kind, entries };
  };

  /** Events a write left (cut off while recovering, or to be gathered again): the next object of their kind begins with them. */
  const giveBack = (kind: Kind, rest: Waiting[]): void => {
    gathering[kind].forget?.();
    gathering[kind].entries.unshift(...rest);
    watch(kind);
  };

  /** Writes one object, retrying while S3 is down or failing on its side, until its window ends. */
  const write = async (kind: Kind, entries: Waiting[]): Promise<void> => {
    const first = entries[0]!;
    const deadline = first.at + maxAgeMs + PUT_WINDOW_MS;
    for (let failures = 0; ; ) {
      const open = entries.filter((entry) => !entry.done);
      if (open.length === 0) return;
      try {
        let written = open;
        if (kind === 'log' && recovering) {
          const firsts = await firstsOfObjects(open);
          const cut = open.findIndex(({ event }, i) => i > 0 && firsts.has(keyPart(receiverId(event))));
          if (cut > 0) written = open.slice(0, cut);
          else if (!firsts.has(keyPart(receiverId(open[0]!.event)))) recovering = false;
        }
        const rest = [...(await recordAndPut(kind, written)), ...open.slice(written.length)];
        if (rest.length > 0) giveBack(kind, rest);
        return;
      } catch (error) {
        const failure = classifyAws(S3_SINK, error);
        if (failure instanceof BusRefusedError || stopping.signal.aborted || first.cut.aborted || clock.now() > deadline) {
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

  /**
   * Writes the objects due, one at a time, until none is; a call while it runs joins it. What became
   * due as it ended (after its last look) is written by the next run.
   */
  const writeDue = (): Promise<void> =>
    (writing ??= (async () => {
      for (let next = nextObject(); next; next = nextObject()) await write(next.kind, next.entries);
    })().finally(() => {
      writing = undefined;
      if (KINDS.some(ready)) void writeDue();
    }));

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
      const row = context?.row;
      const kind: Kind = row ? 'outbox' : 'log';
      return new Promise<void>((resolve, reject) => {
        const gathered = gathering[kind];
        const entry: Waiting = {
          event,
          line: eventJson(event),
          item: row ? `${receiverId(event)}@${row.id}.${row.version}` : receiverId(event),
          heldAs: context?.heldAs,
          suffix: row ? `-replay-${row.id}v${row.version}` : '',
          holding: context?.holding ?? (() => {}),
          at: clock.now(),
          cut: signal,
          done: false,
          resolve: () => {
            entry.done = true;
            resolve();
          },
          reject: (error) => {
            entry.done = true;
            reject(error);
          },
        };
        gathered.entries.push(entry);
        watch(kind);
        if (gathered.entries.length >= maxEvents) void writeDue();
      });
    },
    drain() {
      closing = true;
      void writeDue();
    },
    async close() {
      closing = true;
      const written = (async () => {
        while (writing || KINDS.some(ready)) await writeDue();
      })();
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
  create: ({ config, url, logger, clock, tuning, archive }) => createS3Archive({ settings: config, url, logger, clock, archive, ...tuning }),
};

