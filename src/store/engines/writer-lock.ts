import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import BetterSqlite3 from 'better-sqlite3';
import { RelayError } from '../../errors.js';
import { DatabaseOpenError, isSqliteFile } from './database.js';

/** Another process holds the file's writer lock: a relay serves it, or `store copy` reads it. */
export class WriterLockedError extends RelayError {
  readonly code = 'database_in_use';
  constructor(readonly file: string) {
    super(
      `another boxrelay process is serving ${file} (BOXRELAY_DATABASE): one process writes a SQLite file at a time; ` +
        'stop it first (or use PostgreSQL for several replicas)',
    );
  }
}

export interface WriterLock {
  /** The sidecar file holding the lock. */
  readonly path: string;
  release(): void;
}

/**
 * One writer per SQLite file: an exclusive SQLite lock on `<file>-lock`, held by a connection in
 * EXCLUSIVE locking mode for as long as the process keeps it open. The lock is the operating
 * system's (fcntl) lock that SQLite itself relies on, so it works wherever the database's own
 * locking does, and the kernel drops it when the process ends, SIGKILL included: nothing goes
 * stale. A sidecar rather than the database itself, so readers (`backup`, `dead-letters list`, the
 * checkpointer) keep working beside the writer.
 */
export function acquireWriterLock(file: string): WriterLock {
  const path = `${file}-lock`;
  let lock: BetterSqlite3.Database | undefined;
  try {
    mkdirSync(dirname(path), { recursive: true });
    lock = new BetterSqlite3(path);
    // Refused at once: waiting would only hide that a relay already serves the file.
    lock.pragma('busy_timeout = 0');
    lock.pragma('locking_mode = EXCLUSIVE');
    // No journal file beside the lock (there is nothing in it to protect).
    lock.pragma('journal_mode = MEMORY');
    // In EXCLUSIVE locking mode the first write transaction's lock is kept until the connection closes.
    lock.exec('BEGIN EXCLUSIVE; COMMIT');
  } catch (error) {
    lock?.close();
    if ((error as { code?: string }).code === 'SQLITE_BUSY') throw new WriterLockedError(file);
    throw new DatabaseOpenError(file, error);
  }
  const held = lock;
  return { path, release: () => held.close() };
}

/** The writer lock of the database `url` names: none for PostgreSQL (replicas share it) or an in-memory database. */
export function writerLockFor(url: string): WriterLock | undefined {
  return isSqliteFile(url) ? acquireWriterLock(url) : undefined;
}
