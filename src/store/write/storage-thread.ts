import { Worker } from 'node:worker_threads';
import { StorageUnavailableError } from '../../errors.js';
import { callerOver } from '../../threads/calls.js';
import { CrossedError } from '../../threads/errors.js';
import type { DeliveryWriter } from './delivery-sql.js';
import type { FromStorage, StorageCalls, StorageData, StorageParts, ToStorage } from './storage-messages.js';

export interface StorageThread extends DeliveryWriter, StorageCalls {
  /** Resolves once the thread has opened its connection; rejects if it could not. Calls made before are queued. */
  started: Promise<void>;
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
 * The SQLite write connection in a thread of its own (storage-worker.ts). Each delivery is handed
 * over as it comes: the thread's writer groups those of one turn of its event loop in one commit,
 * and each caller's promise settles when the answer comes, after the commit. A thread that has
 * exited fails every call with StorageUnavailableError (a 503: the sender retries; /readyz reports it).
 */
export function startStorageThread(
  data: StorageData,
  { onCommit, onLost, script = new URL('./storage-worker.js', import.meta.url) }: StorageThreadOptions,
): StorageThread {
  const worker = new Worker(script, { workerData: data });
  const storage = callerOver<StorageParts>(worker);
  const calls = storage.remote('storage');
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
      storage.fail(gone);
      reject(gone);
      if (!closing) onLost(gone);
    });
  });

  // Whoever awaits `started` hears of a failure; the calls made meanwhile fail with it too.
  started.catch(() => {});

  return {
    started,
    record: async (delivery) => {
      const result = await refused(calls.record(delivery));
      if (!result.duplicate) onCommit();
      return result;
    },
    beat: (now) => refused(calls.beat(now)),
    addSinkMinutes: (counts) => refused(calls.addSinkMinutes(counts)),
    async close() {
      closing = true;
      if (gone) return;
      // Not `once`, which rejects on an 'error': a thread that failed is closed all the same.
      const exited = new Promise((resolve) => worker.once('exit', resolve));
      worker.postMessage({ kind: 'close' } satisfies ToStorage);
      await exited;
    },
  };
}
