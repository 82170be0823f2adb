import { sql, type Kysely } from 'kysely';
import { describeError, RelayError } from '../../errors.js';
import { databaseLocation, type Database } from '../engines/database.js';
import { COPIED, type CopiedTable } from './tables.js';

/** The target already holds a relay's data and `--resume` was not given. */
export class CopyTargetNotEmptyError extends RelayError {
  readonly code = 'target_not_empty';
  constructor(url: string, holds: string[]) {
    super(
      `the target (${databaseLocation(url)}) already holds ${holds.join(', ')}: store copy fills an empty database ` +
        '(give --resume to continue an interrupted copy into it)',
    );
  }
}

/** The copy stopped part-way; what was copied stays, and `--resume` continues from there. */
export class CopyInterruptedError extends RelayError {
  readonly code = 'copy_interrupted';
  constructor(cause: unknown) {
    super(`the copy stopped part-way: ${describeError(cause)}; run it again with --resume to continue`, { cause });
  }
}

export interface CopyProgress {
  label: string;
  copied: number;
  total: number;
}

export interface KindCount {
  label: string;
  source: number;
  target: number;
}

// Untyped: the tables and columns come from the list and the source's schema, not from Schema.
type AnyKysely = Kysely<Record<string, Record<string, unknown>>>;

const kyselyOf = (database: Database) => database.kysely as unknown as AnyKysely;
const labelOf = (table: CopiedTable) => table.label ?? table.table;

/**
 * What the target holds of the copied tables, before it is migrated (so a refusal writes nothing).
 * The relay facts are left out: migrating a new database writes its own watch start.
 */
export async function targetHoldings(target: Database): Promise<string[]> {
  const holds: string[] = [];
  for (const table of COPIED.filter((t) => t.table !== 'relay_meta')) {
    const { rows } = await sql<{ present: boolean }>`SELECT to_regclass(${table.table}::text) IS NOT NULL AS present`.execute(target.kysely);
    if (!rows[0]?.present) continue;
    const count = await countRows(target, table.table);
    if (count > 0) holds.push(`${count} ${labelOf(table)}`);
  }
  return holds;
}

async function countRows(database: Database, table: string, where?: string): Promise<number> {
  const filter = where === undefined ? sql`` : sql` WHERE ${sql.raw(where)}`;
  const { rows } = await sql<{ n: number | string }>`SELECT count(*) AS n FROM ${sql.table(table)}${filter}`.execute(database.kysely);
  return Number(rows[0]?.n ?? 0);
}

/** The columns of a source table, as SQLite has them now (whatever migrations added). */
function sourceColumns(source: Database & { dialect: 'sqlite' }, table: string): string[] {
  return (source.sqlite.pragma(`table_info(${JSON.stringify(table)})`) as { name: string }[]).map((column) => column.name);
}

export interface CopyOptions {
  source: Database & { dialect: 'sqlite' };
  /** Migrated already. */
  target: Database & { dialect: 'postgres' };
  onProgress?(progress: CopyProgress): void;
  /** Rows a batch holds at most (also bounded by PostgreSQL's 65,535 parameters). */
  batchRows?: number;
}

/**
 * Copies every table of the list in key order, one multi-row upsert per batch: a batch is written
 * whole or not at all, and writing one again changes nothing, so an interrupted copy is continued
 * by running it again. Then moves the target's serial sequences past the copied ids.
 */
export async function copyStore(options: CopyOptions): Promise<void> {
  try {
    await copyTables(options);
  } catch (error) {
    throw new CopyInterruptedError(error);
  }
}

async function copyTables({ source, target, onProgress = () => {}, batchRows = 500 }: CopyOptions): Promise<void> {
  for (const table of COPIED) {
    const columns = sourceColumns(source, table.table);
    const total = await countRows(source, table.table);
    const batch = Math.max(1, Math.min(batchRows, Math.floor(60_000 / columns.length)));
    let copied = 0;
    let after: unknown[] | undefined;
    onProgress({ label: labelOf(table), copied, total });
    for (;;) {
      const rows = await readBatch(source, table, columns, after, batch);
      if (rows.length === 0) break;
      await writeBatch(target, table, columns, rows);
      copied += rows.length;
      after = table.key.map((column) => rows.at(-1)![column]);
      onProgress({ label: labelOf(table), copied, total });
    }
    await resetSequences(target, table.table);
  }
}

function readBatch(source: Database, table: CopiedTable, columns: string[], after: unknown[] | undefined, limit: number) {
  const key = sql.join(table.key.map((column) => sql.ref(column)));
  let query = kyselyOf(source).selectFrom(table.table).select(columns);
  if (after) query = query.where(sql<boolean>`(${key}) > (${sql.join(after)})`);
  for (const column of table.key) query = query.orderBy(column);
  return query.limit(limit).execute();
}

async function writeBatch(target: Database, table: CopiedTable, columns: string[], rows: Record<string, unknown>[]): Promise<void> {
  const cleared = Object.fromEntries((table.cleared ?? []).map((column) => [column, null]));
  const values = rows.map((row) => ({ ...row, ...cleared }));
  const others = columns.filter((column) => !table.key.includes(column));
  await kyselyOf(target)
    .insertInto(table.table)
    .values(values)
    .onConflict((conflict) => {
      const onKey = conflict.columns(table.key as string[]);
      // The source's values win: the target's own watch start (written by its migration) is replaced.
      return others.length === 0
        ? onKey.doNothing()
        : onKey.doUpdateSet((update) => Object.fromEntries(others.map((column) => [column, update.ref(`excluded.${column}`)])));
    })
    .execute();
}

/** Copied ids were written explicitly, so each serial or identity sequence continues after the largest. */
async function resetSequences(target: Database, table: string): Promise<void> {
  const { rows } = await sql<{ column: string }>`
    SELECT column_name AS column FROM information_schema.columns
    WHERE table_schema = current_schema() AND table_name = ${table}
      AND pg_get_serial_sequence(quote_ident(table_name), column_name) IS NOT NULL`.execute(target.kysely);
  for (const { column } of rows) {
    await sql`SELECT setval(pg_get_serial_sequence(${table}, ${column}), COALESCE(max(${sql.ref(column)}), 0) + 1, false) FROM ${sql.table(table)}`.execute(
      target.kysely,
    );
  }
}

/** Each table's count, and each of its kinds', in source and target. */
export async function countKinds(source: Database, target: Database): Promise<KindCount[]> {
  const counts: KindCount[] = [];
  for (const table of COPIED) {
    for (const kind of [{ label: labelOf(table) }, ...(table.kinds ?? [])]) {
      const [inSource, inTarget] = await Promise.all([countRows(source, table.table, kind.where), countRows(target, table.table, kind.where)]);
      counts.push({ label: kind.label, source: inSource, target: inTarget });
    }
  }
  return counts;
}
