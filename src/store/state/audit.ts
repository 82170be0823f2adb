import type { CompiledQuery, Kysely } from 'kysely';
import { runStatementTransaction, type Compilable } from '../engines/transactions.js';
import type { Database } from '../engines/database.js';
import { once } from '../engines/sqlite-writes.js';
import type { AuditAction, Schema } from '../schema.js';

export type { AuditAction };

/** An operator change to record (contract section 15). */
export interface AuditNote {
  /** Epoch ms. */
  at: number;
  action: AuditAction;
  target: string | null;
  /** The admin client's address, or `cli`. */
  by: string;
  /** The request's parameters (never a secret). */
  detail: Record<string, unknown>;
  /** The event a retry or discard of one dead letter touched: found by `?eventId=`, not shown. */
  eventId?: string | undefined;
}

/** An entry as `GET /admin/audit` answers it. */
export interface AuditEntry extends Omit<AuditNote, 'at' | 'eventId'> {
  id: number;
  at: string;
}

export const AUDIT_ACTIONS: readonly AuditAction[] = ['retry', 'discard', 'retry_all', 'replay', 'pause', 'resume', 'forget', 'reconcile', 'resend'];

export function insertAudit(db: Kysely<Schema>, note: AuditNote): CompiledQuery {
  return db
    .insertInto('audit')
    .values({ at: note.at, action: note.action, target: note.target, by: note.by, detail: JSON.stringify(note.detail), event_id: note.eventId ?? null })
    .compile();
}

/**
 * A change of one statement with its audit row, in one transaction; without a note, just the change.
 * With `onlyIfChanged`, the row only when the change changed rows. Returns the rows changed.
 */
export async function writeAudited(
  database: Database,
  change: Compilable | undefined,
  audit: AuditNote | undefined,
  { onlyIfChanged = false }: { onlyIfChanged?: boolean } = {},
): Promise<number> {
  const audited = audit && !(onlyIfChanged && !change);
  const statements = [
    ...(change ? [once(change.compile())] : []),
    ...(audited ? [once(insertAudit(database.kysely, audit), change && onlyIfChanged ? 0 : undefined)] : []),
  ];
  if (statements.length === 0) return 0;
  const [first] = await runStatementTransaction(database, statements);
  return change ? first!.changed : 0;
}

/** A change recorded outside a transaction of its own (a reconcile run, which is not one write). */
export async function recordAudit(db: Kysely<Schema>, note: AuditNote): Promise<void> {
  await db.executeQuery(insertAudit(db, note));
}

export interface AuditQuery {
  action?: AuditAction | undefined;
  target?: string | undefined;
  eventId?: string | undefined;
  /** Entries older (smaller id) than this one: keyset paging, newest first. */
  beforeId?: number | undefined;
  limit: number;
}

export async function listAudit(db: Kysely<Schema>, query: AuditQuery): Promise<AuditEntry[]> {
  const rows = await db
    .selectFrom('audit')
    .select(['id', 'at', 'action', 'target', 'by', 'detail'])
    .$if(query.action !== undefined, (q) => q.where('action', '=', query.action as AuditAction))
    .$if(query.target !== undefined, (q) => q.where('target', '=', query.target as string))
    .$if(query.eventId !== undefined, (q) => q.where('event_id', '=', query.eventId as string))
    .$if(query.beforeId !== undefined, (q) => q.where('id', '<', query.beforeId as number))
    .orderBy('id', 'desc')
    .limit(query.limit)
    .execute();
  return rows.map((row) => ({
    id: Number(row.id),
    at: new Date(Number(row.at)).toISOString(),
    action: row.action,
    target: row.target,
    by: row.by,
    detail: JSON.parse(row.detail) as Record<string, unknown>,
  }));
}
