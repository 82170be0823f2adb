import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';
import { WORKER_YOUNG_GENERATION_MB } from '../../thread-heap.js';

/** What one `PRAGMA wal_checkpoint(PASSIVE)` did: WAL frames in the log and copied into the database. */
export interface CheckpointResult {
  busy: number;
  log: number;
  checkpointed: number;
}

export interface CheckpointerOptions {
  file: string;
  synchronous: 'FULL' | 'EXTRA' | 'NORMAL';
  intervalMs?: number;
  /** The interval after a checkpoint that found many new frames (a burst of writes: retention, a drain). */
  busyIntervalMs?: number;
  /** Each checkpoint's result, or why it failed (the next one tries again). */
  onCheckpoint?: (result: CheckpointResult) => void;
  onError?: (error: Error) => void;
}

/**
 * The serving connection's own checkpoint is far out of the way (`SERVING_AUTOCHECKPOINT_PAGES`): it
 * would copy the WAL into the database and fsync it on the event loop, inside whichever write crosses
 * the threshold, and a backlog drain crosses SQLite's default threshold several times a second. This
 * is the safety net should the background checkpointer fall behind.
 */
export const SERVING_AUTOCHECKPOINT_PAGES = 20_000;

/** A connection that writes while the relay serves: its own checkpoints only as the safety net. */
export function deferAutocheckpoint(sqlite: { pragma(source: string): unknown }): void {
  sqlite.pragma(`wal_autocheckpoint = ${SERVING_AUTOCHECKPOINT_PAGES}`);
}

/** The longest the store's close waits for the checkpointer's connection to close. */
const STOP_TIMEOUT_MS = 5000;

/*
 * Under steady writes a PASSIVE checkpoint rarely ends with the whole WAL copied (frames arrive while
 * it runs), so the WAL file is not restarted by it: the serving connection's safety net then copies
 * what came since the worker's last checkpoint, and its next write starts the WAL over. That remainder
 * is copied and synced inside a commit, so it must stay small: a quarter of a second of an intake's
 * writes is, but not of retention's deletes (some 60 MB of WAL a second at a million stored: every
 * second or two a commit of the storage thread took 65-230 ms, and the deliveries queued behind it).
 * So after a checkpoint that found many new frames the next comes sooner. A steady intake is such a
 * burst too, which doubles the checkpointer's CPU (14 against 7 µs a delivery at 3,500 a second);
 * quick checkpoints only while the WAL neared the safety net saved that, but retention's intake
 * could not be shown to stay as low with them.
 */

/** New WAL frames (pages) since the last checkpoint beyond which the next runs after `busyIntervalMs`. */
const BUSY_FRAMES = 256;

/**
 * The worker: its own connection, a PASSIVE checkpoint every interval (it never blocks the writer or
 * readers). Plain CommonJS run by `eval`, so it needs no file of its own next to the compiled code.
 */
const WORKER = `
const { parentPort, workerData } = require('node:worker_threads');
const Database = require(workerData.driver);
const db = new Database(workerData.file, { fileMustExist: true });
db.pragma('synchronous = ' + workerData.synchronous);
// A checkpoint copies committed pages; this connection writes no row (the storage thread is the one writer).
db.pragma('query_only = ON');
let framesBefore = 0;
let timer;
const checkpoint = () => {
  let busy = false;
  try {
    const result = db.pragma('wal_checkpoint(PASSIVE)')[0];
    // A WAL started over since holds fewer frames than the last count.
    busy = (result.log >= framesBefore ? result.log - framesBefore : result.log) >= workerData.busyFrames;
    framesBefore = result.log;
    parentPort.postMessage({ result });
  } catch (error) {
    parentPort.postMessage({ error: String(error && error.message) });
  }
  timer = setTimeout(checkpoint, busy ? workerData.busyIntervalMs : workerData.intervalMs);
};
// The first soon: a WAL the last run left may be long.
timer = setTimeout(checkpoint, workerData.busyIntervalMs);
parentPort.on('message', () => {
  clearTimeout(timer);
  db.close();
  parentPort.close();
});
`;

/**
 * WAL checkpoints in a worker thread, off the event loop that answers webhooks. Checkpoints copy
 * committed pages only: durability is the commits' (synchronous as configured), not theirs.
 */
export function startCheckpointer({ file, synchronous, intervalMs = 250, busyIntervalMs = 50, onCheckpoint = () => {}, onError = () => {} }: CheckpointerOptions): {
  stop(): Promise<void>;
} {
  const driver = createRequire(import.meta.url).resolve('better-sqlite3');
  const worker = new Worker(WORKER, {
    eval: true,
    // The OS thread's name too: `top -H` and the bench tell each thread's CPU apart.
    name: 'checkpointer',
    workerData: { driver, file, synchronous, intervalMs, busyIntervalMs, busyFrames: BUSY_FRAMES },
    resourceLimits: { maxYoungGenerationSizeMb: WORKER_YOUNG_GENERATION_MB },
  });
  worker.unref();
  const exited = new Promise((resolve) => worker.once('exit', resolve));
  worker.on('message', (message: { result?: CheckpointResult; error?: string }) =>
    message.result ? onCheckpoint(message.result) : onError(new Error(`WAL checkpoint failed: ${message.error}`)),
  );
  worker.on('error', onError);
  return {
    async stop() {
      // Unreferenced, the worker would not keep the process alive until it has closed its connection.
      worker.ref();
      worker.postMessage('stop');
      // A checkpoint that never ends must not hold up shutdown: every commit is durable without it.
      const stuck = setTimeout(() => void worker.terminate(), STOP_TIMEOUT_MS);
      await exited;
      clearTimeout(stuck);
    },
  };
}
