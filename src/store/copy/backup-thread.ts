import { rmSync } from 'node:fs';
import { Worker } from 'node:worker_threads';
import { WORKER_YOUNG_GENERATION_MB } from '../../thread-heap.js';
import { callerOver } from '../../threads/calls.js';
import { partialFileOf, type BackupResult, type backupSqlite } from './backup.js';

interface BackupParts {
  backup: { run: typeof backupSqlite };
}

/**
 * `backupSqlite` in a thread of its own (backup-worker.ts), started for this one backup. `signal`
 * ends the thread at once and removes its partial copy: a backup is worth no wait at shutdown.
 */
export async function backupInThread(database: string, file: string, signal: AbortSignal): Promise<BackupResult> {
  const worker = new Worker(new URL('./backup-worker.js', import.meta.url), {
    // The OS thread's name too: `top -H` tells the backup's CPU apart.
    name: 'backup',
    resourceLimits: { maxYoungGenerationSizeMb: WORKER_YOUNG_GENERATION_MB },
  });
  const calls = callerOver<BackupParts>(worker);
  worker.once('error', (error) => calls.fail(error));
  worker.once('exit', (code) => calls.fail(new Error(`the backup thread exited (code ${code})`)));
  const cut = () => void worker.terminate();
  signal.addEventListener('abort', cut, { once: true });
  try {
    return await calls.call('backup', 'run', [database, file]);
  } catch (error) {
    // The thread has exited: nothing writes the partial copy any more.
    if (signal.aborted) rmSync(partialFileOf(file), { force: true });
    throw error;
  } finally {
    signal.removeEventListener('abort', cut);
    await worker.terminate();
  }
}
