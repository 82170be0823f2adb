import { NO_SINK_STATE, sinkStateOf, type SinkState } from '../state/sink-state.js';
import { sql, type Kysely, type RawBuilder } from 'kysely';
import type { Database } from '../engines/database.js';
import { leaseClock } from '../engines/database-clock.js';
import type { Schema } from '../schema.js';
import { executeUnsynced } from '../engines/unsynced.js';
import { PARTS, PART_COUNT, logHeadSql, type Position } from './position.js';

/** A partition of a sink's log that this process reads, and where it is done up to. */
export interface HeldPart extends Position {
  part: number;
}

/** A partition as held: the epoch of this holder's take, which its writes name (`log_cursors.epoch`). */
export interface FencedPart extends HeldPart {
  epoch: number;
}

export interface AcquireParts {
  sink: string;
  owner: string;
  now: number;
  leaseMs: number;
  /** A reader not heard of for this long no longer counts toward the fair share. */
  readerTtlMs: number;
  /** The sink's pause epoch whose state this lane has taken: acknowledged with its lease. */
  seenEpoch: number;
  /** False while the lane stops: what it holds is renewed while it drains, nothing more is taken. */
  take: boolean;
}

/** A lane as a reader of its sink: what renews its lease and acknowledges a pause epoch. */
export type Reader = Pick<AcquireParts, 'sink' | 'owner' | 'now' | 'leaseMs' | 'seenEpoch'>;

export interface AcquiredParts {
  /** Every partition this process holds now (renewed), with its stored cursor and epoch. */
  held: FencedPart[];
  /** How many partitions are this process's fair share: it gives back what it holds beyond it. */
  share: number;
  /** The sink's pause state now: of an epoch newer than `seenEpoch`, the lane takes it and acknowledges it. */
  state: SinkState;
}

export interface AdvanceCursors {
  sink: string;
  owner: string;
  now: number;
  cursors: FencedPart[];
  /** Also note when (`log_marks`): a lane does so about once a second, not at every move. */
  mark: boolean;
}

/** Each sink's cursors per partition of the log, and which process reads which partition. */
export interface LogCursors {
  /** Creates the sink's cursors at the log's head when it has none (a sink routed to for the first time). */
  ensureCursors(sinks: string[]): Promise<void>;
  acquireParts(request: AcquireParts): Promise<AcquiredParts>;
  /**
   * The lane's lease as a reader renewed alone, acknowledging `seenEpoch`, and the sink's state now:
   * a lane told of a pause acknowledges it so, even while a read of the log is under way (its
   * partitions are renewed only between reads).
   */
  acknowledge(reader: Reader): Promise<SinkState>;
  /** Moves this process's cursors (of partitions it still holds) forward, with `mark` noting when. */
  advanceCursors(advance: AdvanceCursors): Promise<void>;
  releaseParts(release: { sink: string; owner: string; parts: number[] }): Promise<void>;
  /** The lane stopped: its reader row goes (a pause no longer waits for it, the fair share no longer counts it). */
  leave(lane: { sink: string; owner: string }): Promise<void>;
}

/** The log's head: the last position given (every one up to it is committed). */
export function logHead(database: Pick<Database, 'dialect'>): RawBuilder<number> {
  return sql<number>`${sql.raw(logHeadSql(database.dialect))}`;
}

/** The statement that gives a sink its cursors at the head, unless it has them. */
export function ensureCursorsQuery(db: Kysely<Schema>, database: Pick<Database, 'dialect'>, sink: string, now: number) {
  const head = logHead(database);
  return db
    .insertInto('log_cursors')
    .columns(['sink', 'part', 'seq', 'updated_at'])
    .expression(
      // Cast: PostgreSQL takes parameters in a SELECT list as text.
      sql`SELECT CAST(${sink} AS text), parts.part, ${head}, CAST(${now} AS bigint) FROM (${sql.join(
        PARTS.map((part) => sql`SELECT CAST(${part} AS integer) AS part`),
        sql` UNION ALL `,
        // WHERE: SQLite would read the ON of ON CONFLICT as a join's.
      )}) AS parts WHERE true`,
    )
    .onConflict((oc) => oc.columns(['sink', 'part']).doNothing());
}

/** The columns of a sink's state a renewal answers. */
const STATE_COLUMNS = ['failing_since', 'paused_at', 'paused_by', 'next_probe_at', 'epoch'] as const;

export function createLogCursors(database: Database, clock: () => number = Date.now): LogCursors {
  const db = database.kysely;
  const postgres = database.dialect === 'postgres';
  const leaseNow = leaseClock(database);
  const ensured = new Set<string>();
  const ensureCursors = async (sinks: string[]): Promise<void> => {
    for (const sink of sinks) {
      if (ensured.has(sink)) continue;
      await ensureCursorsQuery(db, database, sink, clock()).execute();
      ensured.add(sink);
    }
  };
  const lanesKnown = new Set<string>();
  /** A lane's reader row locks the sink's state row, which must exist for that (see `register`). */
  const ensureSinkState = async (sink: string): Promise<void> => {
    if (lanesKnown.has(sink)) return;
    await db.insertInto('sink_state').values({ sink, ...NO_SINK_STATE }).onConflict((oc) => oc.column('sink').doNothing()).execute();
    lanesKnown.add(sink);
  };
  /**
   * The lane's heartbeat and lease as a reader of the sink, acknowledging `seenEpoch`; answers the
   * sink's state now (its epoch, its pause, its run of failures), so a renewal costs no read of its own. On PostgreSQL it holds the state row FOR SHARE, so it runs wholly before or
   * wholly after a pause: a pause that commits first is in its answer, and one that commits after
   * sees this row when it waits for the lanes (`SinkStates.lanesBehind`).
   */
  const register = async ({ sink, owner, now, leaseMs, seenEpoch }: Reader): Promise<SinkState> => {
    await ensureSinkState(sink);
    const [row] = await executeUnsynced(
      database,
      db
        .with('state', (qb) =>
          qb
            .selectFrom('sink_state')
            .selectAll()
            .where('sink', '=', sink)
            .$if(postgres, (q) => q.forShare()),
        )
        .insertInto('log_readers')
        .values({ sink, owner, seen_at: leaseNow(now), lease_until: sql<number>`${leaseNow(now)} + ${leaseMs}`, seen_epoch: seenEpoch })
        .onConflict((oc) =>
          oc.columns(['sink', 'owner']).doUpdateSet((eb) => ({
            seen_at: eb.ref('excluded.seen_at'),
            lease_until: eb.ref('excluded.lease_until'),
            seen_epoch: eb.ref('excluded.seen_epoch'),
          })),
        )
        .returning((eb) => STATE_COLUMNS.map((column) => eb.selectFrom('state').select(column).as(column))),
    );
    return sinkStateOf({ sink, ...(row as Omit<SinkState, 'sink'>) });
  };

  // Plain functions, no `this`: the fan-out worker calls them through the main thread.
  return {
    ensureCursors,
    acknowledge: register,

    /**
     * A heartbeat as a reader of the sink, then: the partitions this process holds are renewed, and
     * free ones (never held, released, or of a process whose lease ran out) taken while it holds
     * fewer than its share. Every statement stands alone; on PostgreSQL SKIP LOCKED lets replicas
     * take partitions side by side, and the lease is by the database's clock.
     */
    async acquireParts(request: AcquireParts): Promise<AcquiredParts> {
      const { sink, owner, now, leaseMs, readerTtlMs } = request;
      await ensureCursors([sink]);
      const state = await register(request);
      const live = await db
        .selectFrom('log_readers')
        .select((eb) => eb.fn.countAll<number>().as('count'))
        .where('sink', '=', sink)
        .where('seen_at', '>', sql<number>`${leaseNow(now)} - ${readerTtlMs}`)
        .executeTakeFirst();
      const share = Math.ceil(PART_COUNT / Math.max(1, Number(live?.count ?? 1)));
      const until = sql<number>`${leaseNow(now)} + ${leaseMs}`;
      const renewed = await executeUnsynced(
        database,
        db
          .updateTable('log_cursors')
          .set({ lease_until: until })
          .where('sink', '=', sink)
          .where('lease_owner', '=', owner)
          .where('lease_until', '>', leaseNow(now))
          .returning(['part', 'seq', 'epoch']),
      );
      const wanted = request.take ? share - renewed.length : 0;
      const taken =
        wanted <= 0
          ? []
          : await executeUnsynced(
              database,
              db
                .updateTable('log_cursors')
                // A new holding, a new epoch; this holder's own lease that ran out with no one taking it over goes on as it was.
                .set({ lease_owner: owner, lease_until: until, epoch: sql`CASE WHEN lease_owner = ${owner} THEN epoch ELSE epoch + 1 END` })
                .where('sink', '=', sink)
                .where('part', 'in', (eb) =>
                  eb
                    .selectFrom('log_cursors as free')
                    .select('free.part')
                    .where('free.sink', '=', sink)
                    // Its own live partitions were renewed above: only others' (free) are taken here.
                    .where((w) => w.or([w('free.lease_until', 'is', null), w('free.lease_until', '<=', leaseNow(now))]))
                    .orderBy('free.part')
                    .limit(wanted)
                    .$if(postgres, (q) => q.forUpdate().skipLocked()),
                )
                .returning(['part', 'seq', 'epoch']),
            );
      const held = [...renewed, ...taken].map((row) => ({ part: row.part, seq: Number(row.seq), epoch: Number(row.epoch) }));
      held.sort((a, b) => a.part - b.part);
      return { held, share, state };
    },

    /**
     * Cursor moves lost to a power failure only send events again (at least once), so they need no
     * fsync of their own. A partition taken since by another holder (or by this one anew) is not
     * moved: its epoch moved on.
     */
    async advanceCursors({ sink, owner, now, cursors, mark }: AdvanceCursors): Promise<void> {
      if (cursors.length === 0) return;
      // One statement for every partition that moved (SQLite and PostgreSQL both take UPDATE … FROM).
      const moves = sql.join(
        cursors.map(({ part, seq, epoch }) => sql`SELECT CAST(${part} AS integer) AS part, CAST(${seq} AS bigint) AS seq, CAST(${epoch} AS bigint) AS epoch`),
        sql` UNION ALL `,
      );
      const update = sql<{ part: number }>`UPDATE log_cursors SET seq = m.seq, updated_at = ${now} FROM (${moves}) AS m
        WHERE log_cursors.sink = ${sink} AND log_cursors.part = m.part AND log_cursors.lease_owner = ${owner}
          AND log_cursors.epoch = m.epoch
        RETURNING log_cursors.part`;
      const moved = await executeUnsynced(database, { compile: () => update.compile(db), execute: async () => (await update.execute(db)).rows });
      if (!mark) return;
      const stored = new Set(moved.map((row) => Number(row.part)));
      const marks = cursors.filter(({ part }) => stored.has(part)).map(({ part, seq }) => ({ sink, part, seq, at: now }));
      if (marks.length > 0) await executeUnsynced(database, db.insertInto('log_marks').values(marks));
    },

    async leave({ sink, owner }: { sink: string; owner: string }): Promise<void> {
      await executeUnsynced(database, db.deleteFrom('log_readers').where('sink', '=', sink).where('owner', '=', owner));
    },

    async releaseParts({ sink, owner, parts }: { sink: string; owner: string; parts: number[] }): Promise<void> {
      if (parts.length === 0) return;
      await executeUnsynced(
        database,
        db
          .updateTable('log_cursors')
          .set({ lease_owner: null, lease_until: null })
          .where('sink', '=', sink)
          .where('lease_owner', '=', owner)
          .where('part', 'in', parts),
      );
    },
  };
}
