import { MessageChannel, Worker, type MessagePort } from 'node:worker_threads';
import { StorageUnavailableError } from '../../errors.js';
import { WORKER_YOUNG_GENERATION_MB } from '../../thread-heap.js';
import { groupCommit } from '../../group-commit.js';
import { callerOver } from '../../threads/calls.js';
import { CrossedError } from '../../threads/errors.js';
import { openDatabase, type Database, type DatabaseOptions } from '../engines/database.js';
import { routeWrites } from '../engines/route-writes.js';
import type { SqliteWriter } from '../engines/sqlite-writes.js';
import type { DeliveryWriter, NewDelivery, RecordResult } from './delivery-sql.js';
import { packDeliveries } from './packed-deliveries.js';
import type { FromStorage, StorageData, StorageParts, ToStorage } from './storage-messages.js';

/** Another thread's own port to the storage thread, so its writes go there without a hop through this thread. */
export interface StorageLink {
  /** To transfer to that thread (at its spawn); its end serves `StorageParts['storage']`. */
  port: MessagePort;
  /** Resolves once that thread is gone and every write it sent has been answered (then committed or refused). */
  drained(): Promise<void>;
}

export interface StorageThread extends DeliveryWriter, SqliteWriter {
  /** Resolves once the thread has opened its connection; rejects if it could not. Calls made before are queued. */
  started: Promise<void>;
  /** A port for another thread (the fan-out worker): one per thread, as it is transferred. */
  link(): StorageLink;
  /** Answers everything already handed over, then closes the thread's connection. */
  close(): Promise<void>;
}

/** What the thread failed with, as the receiver's 503 (its cause the driver's error, e.g. the disk full); a thread gone already says so. */
const refused = <T>(call: Promise<T>): Promise<T> =>
  call.catch((error: unknown) => Promise.reject(error instanceof CrossedError ? new StorageUnavailableError({ cause: error }) : error));

export interface StorageThreadOptions {
  onCommit(): void;
  /** The thread ended although nobody closed it (a crash): every delivery from now on is refused. */
  onLost(error: StorageUnavailableError): void;
  /** The thread's module (tests give one that fails). */
  script?: URL;
}

/**
 * The one write connection to a SQLite file, in a thread of its own (storage-worker.ts). The
 * deliveries of one turn of this thread's loop cross in one message, and every write of the
 * connections that only read (this thread's, the fan-out worker's through its own `link`) as it
 * comes: the thread's writer groups those of one turn of its event loop in one commit, and each
 * caller is answered when the thread's answer comes, after the commit. A thread that has exited fails
 * every call with StorageUnavailableError (for a delivery a 503: the sender retries; /readyz reports it).
 */
export function startStorageThread(
  data: StorageData,
  { onCommit, onLost, script = new URL('./storage-worker.js', import.meta.url) }: StorageThreadOptions,
): StorageThread {
  const worker = new Worker(script, {
    // The OS thread's name too: `top -H` and the bench tell each thread's CPU apart.
    name: 'storage',
    workerData: data,
    resourceLimits: { maxYoungGenerationSizeMb: WORKER_YOUNG_GENERATION_MB },
  });
  const calls = callerOver<StorageParts>(worker);
  const storage = calls.remote('storage');
  const links = calls.remote('links');
  let nextLink = 0;
  let closing = false;
  let gone: StorageUnavailableError | undefined;

  const started = new Promise<void>((resolve, reject) => {
    worker.on('message', (message: FromStorage) => {
      if (message.kind === 'ready') resolve();
    });
    worker.once('error', (error) => {
      gone = new StorageUnavailableError({ cause: error });
      reject(error);
    });
    worker.once('exit', (code) => {
      gone ??= new StorageUnavailableError({ cause: new Error(`the storage thread exited (code ${code})`) });
      calls.fail(gone);
      reject(gone);
      if (!closing) onLost(gone);
    });
  });

  // Whoever awaits `started` hears of a failure; the calls made meanwhile fail with it too.
  started.catch(() => {});

  // Transport coalescing, not a second commit queue: the deliveries handed over within one turn of
  // this loop cross in one message, packed in one buffer that is transferred (not cloned object by
  // object), and come back in one answer, each with its own outcome. Which of them commit together
  // is the storage thread's writer's alone (its turn), as for every other write: a turn's message
  // waits for no earlier one's answer.
  const turns = groupCommit<NewDelivery, RecordResult>({
    concurrency: Infinity,
    async commit(deliveries) {
      const packed = packDeliveries(deliveries);
      const outcomes = await calls.call('deliveries', 'record', [packed], [packed.buffer]);
      return deliveries.map((_, i) => {
        const outcome = outcomes[i] ?? { error: { message: 'the storage thread gave no outcome for this delivery' } };
        return 'error' in outcome ? { error: new CrossedError(outcome.error) } : { value: outcome };
      });
    },
  });

  return {
    started,
    record: async (delivery) => {
      const result = await refused(turns.add(delivery));
      if (!result.duplicate) onCommit();
      return result;
    },
    write: (statements, durability) => storage.write(statements, durability),
    runNamedTransaction: (name, args) => storage.runNamedTransaction(name, args),
    link() {
      const id = nextLink++;
      const { port1, port2 } = new MessageChannel();
      worker.postMessage({ kind: 'link', id, port: port1 } satisfies ToStorage, [port1]);
      return { port: port2, drained: () => links.drained(id) };
    },
    async close() {
      closing = true;
      if (gone) return;
      // What was handed over in this turn goes first (sent now, as the flush starts it): the thread answers it before it closes.
      void turns.flush();
      // Not `once`, which rejects on an 'error': a thread that failed is closed all the same.
      const exited = new Promise((resolve) => worker.once('exit', resolve));
      worker.postMessage({ kind: 'close' } satisfies ToStorage);
      await exited;
    },
  };
}

/**
 * In the thread a link was transferred to: a connection of its own to the file that only reads, its
 * writes sent to the storage thread over the link (answered there after their commit). Calls still
 * waiting when the storage thread is gone fail.
 */
export function openLinkedDatabase(options: DatabaseOptions, port: MessagePort): Database {
  const database = openDatabase(options);
  if (database.dialect !== 'sqlite') throw new Error('a link to the storage thread serves a SQLite file only');
  const calls = callerOver<StorageParts>(port);
  port.once('close', () => calls.fail(new StorageUnavailableError({ cause: new Error('the storage thread is gone') })));
  return routeWrites(database, calls.remote('storage'));
}
