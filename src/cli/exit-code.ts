import { CopyTargetNotEmptyError } from '../store/copy/copy-store.js';
import { BackupOverSourceError } from '../store/backup.js';
import { UnknownMigrationError } from '../store/migrate.js';
import { WriterLockedError } from '../store/writer-lock.js';

/** Refusals the user acts on (the file is in use, the database is newer or not empty): exit 2, like invalid configuration. */
const REFUSALS = [WriterLockedError, UnknownMigrationError, CopyTargetNotEmptyError, BackupOverSourceError];

/** The exit code of a command that ended with `error`: 2 for a refusal, 1 for a failure. */
export function exitCodeOf(error: unknown): 1 | 2 {
  return REFUSALS.some((refusal) => error instanceof refusal) ? 2 : 1;
}
