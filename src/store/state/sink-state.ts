import { sql, type Kysely, type Selectable } from 'kysely';
import { writeAudited, type AuditNote } from './audit.js';
import type { Database } from '../engines/database.js';
import { leaseClock } from '../engines/database-clock.js';
import type { Schema, SinkStateTable } from '../schema.js';

export type SinkState = Selectable<SinkStateTable>;

/** One probe attempt a minute while a sink is paused by its failures (contract section 5). */
export const PROBE_INTERVAL_MS = 60_000;

/** A sink's pause fields when it is not paused (the epoch is the row's own). */
const NOT_PAUSED = { paused_at: null, paused_by: null, next_probe_at: null } as const;
/** A sink never paused nor failing: the state of a sink without a row, and a new row's. */
export const NO_SINK_STATE: Omit<SinkState, 'sink'> = { failing_since: null, ...NOT_PAUSED, epoch: 0 };

/** The row as read: PostgreSQL answers a bigint as a string. */
export const sinkStateOf = (row: SinkState): SinkState => ({ ...row, epoch: Number(row.epoch) });

export interface SinkStates {
  read(sink: string): Promise<SinkState>;
  readAll(): Promise<Map<string, SinkState>>;
  failed(sink: string, now: number): Promise<SinkState>;
  /** True when this ended a run of failures that began at or before `longRunSince`. */
  succeeded(sink: string, longRunSince: number): Promise<boolean>;
  /** With `audit` (an operator's request), recorded in the same transaction, whether or not it changed anything. */
  pause(sink: string, by: 'failures' | 'operator', now: number, audit?: AuditNote): Promise<boolean>;
  resume(sink: string, by: 'probe' | 'operator', audit?: AuditNote): Promise<boolean>;
  takeProbe(sink: string, now: number): Promise<boolean>;
  /**
   * How many lanes (one per process serving the sink) hold a lease that has not ended by the lease
   * clock and have not acknowledged `epoch`: a pause holds once this is 0 (see `log_readers`).
   */
  lanesBehind(sink: string, epoch: number, now: number): Promise<number>;
}

/**
 * Pause state shared by the replicas, one row per sink. Each change is one statement whose
 * RETURNING says whether this process made it, so a pause or a resume is announced once. Probe
 * times are by the lease clock (the database's on PostgreSQL), so replicas whose clocks disagree
 * still probe once a minute between them.
 */
export function createSinkStates(database: Database): SinkStates {
  const db: Kysely<Schema> = database.kysely;
  const leaseNow = leaseClock(database);
  const nextProbe = (now: number) => sql<number>`${leaseNow(now)} + ${PROBE_INTERVAL_MS}`;
  return {
    async read(sink: string): Promise<SinkState> {
      const row = await db.selectFrom('sink_state').selectAll().where('sink', '=', sink).executeTakeFirst();
      return row ? sinkStateOf(row) : { sink, ...NO_SINK_STATE };
    },

    async readAll(): Promise<Map<string, SinkState>> {
      const rows = await db.selectFrom('sink_state').selectAll().execute();
      return new Map(rows.map((row) => [row.sink, sinkStateOf(row)]));
    },

    /** A failed attempt: the sink has failed every attempt since `failing_since` (kept when already set). */
    async failed(sink: string, now: number): Promise<SinkState> {
      return db
        .insertInto('sink_state')
        .values({ sink, ...NO_SINK_STATE, failing_since: now })
        .onConflict((oc) => oc.column('sink').doUpdateSet((eb) => ({ failing_since: eb.fn.coalesce('sink_state.failing_since', 'excluded.failing_since') })))
        .returningAll()
        .executeTakeFirstOrThrow()
        .then(sinkStateOf);
    },

    /** A delivered attempt ends a run of failures; the first statement tells a long run (whose end is a recovery) from a short one. */
    async succeeded(sink: string, longRunSince: number): Promise<boolean> {
      const endRun = () => db.updateTable('sink_state').set({ failing_since: null }).where('sink', '=', sink);
      const long = await endRun().where('failing_since', '<=', longRunSince).executeTakeFirst();
      if (long.numUpdatedRows > 0n) return true;
      await endRun().where('failing_since', 'is not', null).execute();
      return false;
    },

    /**
     * True when this call paused it: it was not paused, or (by an operator) it was paused by its
     * failures, which the operator's pause replaces: no more probes, so nothing resumes it but a hand.
     * Either grows the epoch.
     */
    async pause(sink: string, by: 'failures' | 'operator', now: number, audit?: AuditNote): Promise<boolean> {
      const nextProbeAt = by === 'failures' ? nextProbe(now) : null;
      const pause = db
        .insertInto('sink_state')
        .values({ sink, ...NO_SINK_STATE, paused_at: now, paused_by: by, next_probe_at: nextProbeAt, epoch: 1 })
        .onConflict((oc) =>
          oc
            .column('sink')
            .doUpdateSet({ paused_at: now, paused_by: by, next_probe_at: nextProbeAt, epoch: sql`sink_state.epoch + 1` })
            .where((eb) =>
              by === 'operator'
                ? eb.or([eb('sink_state.paused_at', 'is', null), eb('sink_state.paused_by', '=', 'failures')])
                : eb('sink_state.paused_at', 'is', null),
            ),
        )
        .returning('sink');
      // RETURNING answers the row only when the insert or the update was made.
      return (await writeAudited(database, pause, audit)) > 0;
    },

    /** True when this call resumed it (it was paused; a probe resumes only a pause by failures); grows the epoch. */
    async resume(sink: string, by: 'probe' | 'operator', audit?: AuditNote): Promise<boolean> {
      const resume = db
        .updateTable('sink_state')
        .set({ ...NOT_PAUSED, failing_since: null, epoch: sql`epoch + 1` })
        .where('sink', '=', sink)
        .where('paused_at', 'is not', null)
        .$if(by === 'probe', (q) => q.where('paused_by', '=', 'failures'));
      return (await writeAudited(database, resume, audit)) > 0;
    },

    /** While paused by failures: true when this process may make the probe attempt now (one a minute, across replicas). */
    async takeProbe(sink: string, now: number): Promise<boolean> {
      const result = await db
        .updateTable('sink_state')
        .set({ next_probe_at: nextProbe(now) })
        .where('sink', '=', sink)
        .where('paused_by', '=', 'failures')
        .where('next_probe_at', '<=', leaseNow(now))
        .executeTakeFirst();
      return result.numUpdatedRows > 0n;
    },

    async lanesBehind(sink: string, epoch: number, now: number): Promise<number> {
      const row = await db
        .selectFrom('log_readers')
        .select((eb) => eb.fn.countAll<number>().as('count'))
        .where('sink', '=', sink)
        .where('lease_until', '>', leaseNow(now))
        .where('seen_epoch', '<', epoch)
        .executeTakeFirst();
      return Number(row?.count ?? 0);
    },
  };
}
