import type { Kysely } from 'kysely';
import type { Schema } from '../schema.js';

export type RunOutcome = 'succeeded' | 'failed' | 'dry-run';

/** What a reconciliation run would do, listed by a dry run. */
export interface PlannedAction {
  boxId: string;
  action: 'relay-history' | 'synthesize' | 'record-state' | 'forget';
  eventId?: string;
  type?: string;
  state?: string;
}

/** The run report of contract section 9 (times as ISO 8601). */
export interface Run {
  id: string;
  startedAt: string;
  finishedAt: string | null;
  /** Null while the run goes on. */
  outcome: RunOutcome | null;
  boxesListed: number;
  boxesRepaired: number;
  eventsFromHistory: number;
  eventsSynthesized: number;
  boxesForgotten: number;
  /** History records that are not lifecycle events, or malformed ones, skipped (contract section 9, step 3). */
  historyRecordsSkipped: number;
  error: string | null;
  /** Dry runs only: what a real run would do. */
  actions?: PlannedAction[];
}

/** The time the relay's database was created (or took the reconciliation migration). */
export async function readWatchStart(kysely: Kysely<Schema>): Promise<string> {
  const row = await kysely.selectFrom('relay_meta').select('value').where('name', '=', 'watch_start').executeTakeFirstOrThrow();
  return row.value;
}

/** A run's report, as one of `account`'s (contract section 21). */
export async function saveRun(kysely: Kysely<Schema>, run: Run, account: string): Promise<void> {
  const row = {
    account,
    started_at: Date.parse(run.startedAt),
    finished_at: run.finishedAt === null ? null : Date.parse(run.finishedAt),
    outcome: run.outcome,
    report: JSON.stringify(run),
  };
  await kysely
    .insertInto('reconcile_runs')
    .values({ id: run.id, ...row })
    .onConflict((oc) => oc.column('id').doUpdateSet(row))
    .execute();
}

/** The account's newest finished run, across replicas. */
export async function lastFinishedRun(kysely: Kysely<Schema>, account: string): Promise<Run | null> {
  const row = await kysely
    .selectFrom('reconcile_runs')
    .select('report')
    .where('account', '=', account)
    .where('finished_at', 'is not', null)
    .orderBy('started_at', 'desc')
    .limit(1)
    .executeTakeFirst();
  if (!row) return null;
  // Reports stored before the count existed read as having skipped nothing.
  const run = JSON.parse(row.report) as Omit<Run, 'historyRecordsSkipped'> & Partial<Run>;
  return { ...run, historyRecordsSkipped: run.historyRecordsSkipped ?? 0 };
}

/** Epoch ms of the account's newest start of a real run (finished or not; dry runs repair nothing), or null. */
export async function lastRunStartedAt(kysely: Kysely<Schema>, account: string): Promise<number | null> {
  const row = await kysely
    .selectFrom('reconcile_runs')
    .select((eb) => eb.fn.max('started_at').as('at'))
    .where('account', '=', account)
    .where((eb) => eb.or([eb('outcome', 'is', null), eb('outcome', '!=', 'dry-run')]))
    .executeTakeFirst();
  return row?.at == null ? null : Number(row.at);
}

/**
 * Epoch ms of the oldest among these accounts' newest successful runs, or null while one of them has
 * none: so a gauge of it ages as soon as any account's runs stop succeeding.
 */
export async function lastSuccessAt(kysely: Kysely<Schema>, accounts: readonly string[]): Promise<number | null> {
  if (accounts.length === 0) return null;
  const rows = await kysely
    .selectFrom('reconcile_runs')
    .select((eb) => ['account', eb.fn.max('finished_at').as('at')])
    .where('account', 'in', accounts)
    .where('outcome', '=', 'succeeded')
    .groupBy('account')
    .execute();
  if (rows.length < accounts.length) return null;
  return Math.min(...rows.map((row) => Number(row.at)));
}

/** Runs older than the retention window go with the deliveries. */
export async function pruneRuns(kysely: Kysely<Schema>, cutoff: number): Promise<void> {
  await kysely.deleteFrom('reconcile_runs').where('started_at', '<', cutoff).where('finished_at', 'is not', null).execute();
}
