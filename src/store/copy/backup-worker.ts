// The backup thread's entry: one `boxrelay backup` of the file the relay serves. Its steps and its
// integrity check (seconds on a large file) run here, not on the thread that answers webhooks.
import { parentPort } from 'node:worker_threads';
import { serveParts } from '../../threads/calls.js';
import { backupSqlite } from './backup.js';

if (!parentPort) throw new Error('backup-worker.js runs as a worker thread of `boxrelay serve`');
serveParts(parentPort, { backup: { run: backupSqlite } });
