import { RelayError, type ErrorCode } from '../errors.js';

/** Refusals the user acts on (the file is in use, the database is newer or not empty): exit 2, like invalid configuration. */
const REFUSALS: ReadonlySet<ErrorCode> = new Set<ErrorCode>(['database_in_use', 'unknown_migration', 'target_not_empty', 'backup_over_source']);

/** The exit code of a command that ended with `error`: 2 for a refusal, 1 for a failure. */
export function exitCodeOf(error: unknown): 1 | 2 {
  return error instanceof RelayError && REFUSALS.has(error.code) ? 2 : 1;
}
