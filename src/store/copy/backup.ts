import { renameSync, rmSync, statSync } from 'node:fs';
import { resolve } from 'node:path';
import BetterSqlite3 from 'better-sqlite3';
import { RelayError } from '../../errors.js';
import { DatabaseOpenError } from '../engines/database.js';

/** The copy failed SQLite's integrity check (or the backup could not be written). */
export class BackupFailedError extends RelayError {
  readonly code = 'backup_failed';
}

/** `backup` names the database itself as the copy. */
export class BackupOverSourceError extends RelayError {
  readonly code = 'backup_over_source';
  constructor(file: string) {
    super(`the backup file ${file} is the database itself (BOXRELAY_DATABASE); name another file`);
  }
}

export interface BackupResult {
  file: string;
  bytes: number;
  /** Deliveries the copy holds. */
  deliveries: number;
}

export interface BackupOptions {
  /** Pages copied per step; between steps the event loop runs (default 256, 1 MiB of 4 KiB pages). */
  pagesPerStep?: number;
}

/**
 * SQLite's online backup of a database a relay may be serving, in steps. The source connection
 * holds one read transaction across every step: in WAL mode that does not stop the relay's writes,
 * and it keeps the copy at one snapshot (without it, each write between steps would restart the
 * backup, which then might never end under steady traffic). The copy is written beside the target
 * name, checked (`PRAGMA integrity_check`), switched to a self-contained rollback journal, and only
 * then renamed into place, so `file` never holds a partial or unchecked copy.
 */
export async function backupSqlite(database: string, file: string, { pagesPerStep = 256 }: BackupOptions = {}): Promise<BackupResult> {
  const target = resolve(file);
  if (target === resolve(database)) throw new BackupOverSourceError(target);
  const source = openSnapshot(database);
  const partial = partialFileOf(target);
  try {
    await source.backup(partial, { progress: () => pagesPerStep });
    source.exec('COMMIT');
    const deliveries = checkCopy(partial);
    renameSync(partial, target);
    return { file: target, bytes: statSync(target).size, deliveries };
  } catch (error) {
    rmSync(partial, { force: true });
    throw error;
  } finally {
    source.close();
  }
}

/** Where the copy of `file` is written until it is checked (a copy cut short leaves it: remove it then). */
export function partialFileOf(file: string): string {
  return `${resolve(file)}.partial-${process.pid}`;
}

/** A connection to the existing database holding one read transaction (its snapshot). */
function openSnapshot(database: string): BetterSqlite3.Database {
  let source: BetterSqlite3.Database | undefined;
  try {
    source = new BetterSqlite3(database, { fileMustExist: true });
    source.exec('BEGIN');
    source.prepare('SELECT count(*) FROM sqlite_master').get();
    return source;
  } catch (error) {
    source?.close();
    throw new DatabaseOpenError(database, error);
  }
}

/** Checks the copy and counts its deliveries; it is left a single file (no WAL beside it). */
function checkCopy(file: string): number {
  const copy = new BetterSqlite3(file);
  try {
    copy.pragma('journal_mode = DELETE');
    const problems = (copy.pragma('integrity_check') as { integrity_check: string }[]).map((row) => row.integrity_check);
    if (problems.join() !== 'ok') throw new BackupFailedError(`the copy failed its integrity check: ${problems.slice(0, 5).join('; ')}`);
    return (copy.prepare('SELECT count(*) AS n FROM deliveries').get() as { n: number }).n;
  } finally {
    copy.close();
  }
}
