import { Worker } from 'node:worker_threads';
import { StorageUnavailableError } from '../../errors.js';
import { WORKER_YOUNG_GENERATION_MB } from '../../thread-heap.js';
import { errorFrom, type ThreadError } from '../../dispatch/thread-messages.js';
import type { DeliveryWriter, NewDelivery, RecordResult } from './delivery-sql.js';
import type { FromStorage, StorageCalls, StorageData, ToStorage } from './storage-messages.js';

export interface StorageThread extends DeliveryWriter, StorageCalls {
  /** Resolves once the thread has opened its connection; rejects if it could not. Calls made before are queued. */
  started: Promise<void>;
  /** Answers everything already handed over, then closes the thread's connection. */
  close(): Promise<void>;
}

interface Caller<T> {
  resolve(value: T): void;
  reject(error: Error): void;
}

/** What the thread failed with, as the receiver's 503 (its cause the driver's error, e.g. the disk full). */
const refusal = (error: ThreadError) => new StorageUnavailableError({ cause: errorFrom(error) });

export interface StorageThreadOptions {
  onCommit(): void;
  /** The thread ended although nobody closed it (a crash): every delivery from now on is refused. */
  onLost(error: StorageUnavailableError): void;
  /** The thread's module (tests give one that fails). */
  script?: URL;
}

/**
 * The SQLite write connection in a thread of its own (storage-worker.ts), which group-commits what
 * this thread hands it: the deliveries of one turn of this event loop go as one message, and each
 * caller's promise settles when the answer comes, after the commit. A thread that has exited fails
 * every call with StorageUnavailableError (a 503: the sender retries; /readyz reports it).
 */
export function startStorageThread(
  data: StorageData,
  { onCommit, onLost, script = new URL('./storage-worker.js', import.meta.url) }: StorageThreadOptions,
): StorageThread {
  const worker = new Worker(script, { workerData: data, resourceLimits: { maxYoungGenerationSizeMb: WORKER_YOUNG_GENERATION_MB } });
  let closing = false;
  let nextId = 0;
  const recording = new Map<number, Caller<RecordResult>[]>();
  const calling = new Map<number, Caller<void>>();
  let queue: NewDelivery[] = [];
  let callers: Caller<RecordResult>[] = [];
  let gone: StorageUnavailableError | undefined;

  const flush = () => {
    if (queue.length === 0) return;
    const id = nextId++;
    recording.set(id, callers);
    worker.postMessage({ kind: 'record', id, deliveries: queue } satisfies ToStorage);
    queue = [];
    callers = [];
  };
  const call =
    <M extends keyof StorageCalls>(method: M) =>
    (...args: Parameters<StorageCalls[M]>): Promise<void> =>
      new Promise((resolve, reject) => {
        if (gone) return reject(gone);
        const id = nextId++;
        calling.set(id, { resolve, reject });
        worker.postMessage({ kind: 'call', id, method, args } as ToStorage);
      });

  const started = new Promise<void>((resolve, reject) => {
    worker.on('message', (message: FromStorage) => {
      switch (message.kind) {
        case 'ready':
          return resolve();
        case 'recorded': {
          const batch = recording.get(message.id) ?? [];
          recording.delete(message.id);
          let stored = false;
          message.results.forEach((settled, i) => {
            if ('error' in settled) return batch[i]?.reject(refusal(settled.error));
            stored ||= !settled.value.duplicate;
            batch[i]?.resolve(settled.value);
          });
          if (stored) onCommit();
          return;
        }
        case 'answered': {
          const caller = calling.get(message.id);
          calling.delete(message.id);
          return 'error' in message.result ? caller?.reject(refusal(message.result.error)) : caller?.resolve();
        }
      }
    });
    worker.once('error', (error) => {
      gone = new StorageUnavailableError({ cause: error });
      reject(error);
    });
    worker.once('exit', (code) => {
      gone ??= new StorageUnavailableError({ cause: new Error(`the storage thread exited (code ${code})`) });
      for (const batch of recording.values()) for (const caller of batch) caller.reject(gone);
      for (const caller of [...callers, ...calling.values()]) caller.reject(gone);
      recording.clear();
      calling.clear();
      queue = [];
      callers = [];
      reject(gone);
      if (!closing) onLost(gone);
    });
  });

  // Whoever awaits `started` hears of a failure; the calls made meanwhile fail with it too.
  started.catch(() => {});

  return {
    started,
    record: (delivery) =>
      new Promise<RecordResult>((resolve, reject) => {
        if (gone) return reject(gone);
        if (queue.length === 0) setImmediate(flush);
        queue.push(delivery);
        callers.push({ resolve, reject });
      }),
    beat: call('beat'),
    addSinkMinutes: call('addSinkMinutes'),
    async close() {
      closing = true;
      if (gone) return;
      // Not `once`, which rejects on an 'error': a thread that failed is closed all the same.
      const exited = new Promise((resolve) => worker.once('exit', resolve));
      // Deliveries handed over this turn go first: the thread answers them before it closes.
      flush();
      worker.postMessage({ kind: 'close' } satisfies ToStorage);
      await exited;
    },
  };
}
