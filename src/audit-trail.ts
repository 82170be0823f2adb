import type { Clock } from './clock.js';
import { untrusted, type Logger } from './log.js';
import type { AuditNote } from './store/state/audit.js';

/** Who asked for a change, and what they asked: the audit entry less its time. */
export type AuditChange = Omit<AuditNote, 'at'>;

export interface AuditTrail {
  /**
   * Runs an operator's change (admin API or CLI) with its audit entry, dated now, which the change
   * writes in its own transaction; once it succeeded, one log line. A change that throws (a refused
   * request) is neither recorded nor logged.
   */
  record<T>(change: AuditChange, run: (note: AuditNote) => Promise<T>): Promise<T>;
}

export function createAuditTrail({ clock, logger }: { clock: Clock; logger: Logger }): AuditTrail {
  const log = logger.child({ part: 'audit' });
  return {
    async record(change, run) {
      const note: AuditNote = { ...change, at: clock.now() };
      const result = await run(note);
      // The target comes from a request path: cut short like any untrusted value.
      log.info({ action: note.action, target: note.target && untrusted(note.target), by: note.by, detail: note.detail }, `operator action: ${note.action}`);
      return result;
    },
  };
}

/** The client address of an admin request: an IPv4 client as `127.0.0.1`, not its IPv4-mapped IPv6 form. */
export function clientAddress(address: string | undefined): string {
  if (address === undefined) return 'unknown';
  return /^::ffff:\d{1,3}(\.\d{1,3}){3}$/i.test(address) ? address.slice(7) : address;
}

/** What the CLI writes as `by`. */
export const CLI_ACTOR = 'cli';
