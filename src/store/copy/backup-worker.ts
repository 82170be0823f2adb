// The backup thread's entry: one `boxrelay backup` of the file the relay serves. Its steps and its
// integrity check (seconds on a large file) run here, not on the thread that answers webhooks.
import { parentPort } from 'node:worker_threads';
import { serveParts } from '../../threads/calls.js';
import { raiseThreadNiceness } from '../../threads/thread-priority.js';
import { backupSqlite } from './backup.js';

/**
 * Below the threads that answer webhooks on short cores, as the fan-out's default; not the nicest:
 * the copy holds a read snapshot, and until it ends the WAL cannot start over.
 */
const NICENESS = 10;

if (!parentPort) throw new Error('backup-worker.js runs as a worker thread of `boxrelay serve`');
// Where the kernel refuses, the backup runs at the process's priority: slower answers at worst, never other results.
await raiseThreadNiceness(NICENESS).catch(() => {});
serveParts(parentPort, { backup: { run: backupSqlite } });
