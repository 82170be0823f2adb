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

export interface AcquireParts {
  sink: string;
  owner: string;
  now: number;
  leaseMs: number;
  /** A reader not heard of for this long no longer counts toward the fair share. */
  readerTtlMs: number;
}

export interface AcquiredParts {
  /** Every partition this process holds now (renewed), with its stored cursor. */
  held: HeldPart[];
  /** How many partitions are this process's fair share: it gives back what it holds beyond it. */
  share: number;
}

export interface AdvanceCursors {
  sink: string;
  owner: string;
  now: number;
  cursors: HeldPart[];
  /** Also note when (`log_marks`): a lane does so about once a second, not at every move. */
  mark: boolean;
}

/** Each sink's cursors per partition of the log, and which process reads which partition. */
export interface LogCursors {
  /** Creates the sink's cursors at the log's head when it has none (a sink routed to for the first time). */
  ensureCursors(sinks: string[]): Promise<void>;
  acquireParts(request: AcquireParts): Promise<AcquiredParts>;
  /** Moves this process's cursors (of partitions it still holds) forward, with `mark` noting when. */
  advanceCursors(advance: AdvanceCursors): Promise<void>;
  releaseParts(release: { sink: string; owner: string; parts: number[] }): Promise<void>;
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

  // Plain functions, no `this`: the fan-out worker calls them through the main thread.
  return {
    ensureCursors,

    /**
     * A heartbeat as a reader of the sink, then: the partitions this process holds are renewed, and
     * free ones (never held, released, or of a process whose lease ran out) taken while it holds
     * fewer than its share. Every statement stands alone; on PostgreSQL SKIP LOCKED lets replicas
     * take partitions side by side, and the lease is by the database's clock.
     */
    async acquireParts({ sink, owner, now, leaseMs, readerTtlMs }: AcquireParts): Promise<AcquiredParts> {
      await ensureCursors([sink]);
      await executeUnsynced(
        database,
        db
          .insertInto('log_readers')
          .values({ sink, owner, seen_at: leaseNow(now) })
          .onConflict((oc) => oc.columns(['sink', 'owner']).doUpdateSet({ seen_at: leaseNow(now) })),
      );
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
          .returning(['part', 'seq']),
      );
      const wanted = share - renewed.length;
      const taken =
        wanted <= 0
          ? []
          : await executeUnsynced(
              database,
              db
                .updateTable('log_cursors')
                .set({ lease_owner: owner, lease_until: until })
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
                .returning(['part', 'seq']),
            );
      const held = [...renewed, ...taken].map((row) => ({ part: row.part, seq: Number(row.seq) }));
      held.sort((a, b) => a.part - b.part);
      return { held, share };
    },

    /**
     * Cursor moves lost to a power failure only send events again (at least once), so they need no
     * fsync of their own. A partition another process took over meanwhile is not moved.
     */
    async advanceCursors({ sink, owner, now, cursors, mark }: AdvanceCursors): Promise<void> {
      if (cursors.length === 0) return;
      // One statement for every partition that moved (SQLite and PostgreSQL both take UPDATE … FROM).
      const moves = sql.join(
        cursors.map(({ part, seq }) => sql`SELECT CAST(${part} AS integer) AS part, CAST(${seq} AS bigint) AS seq`),
        sql` UNION ALL `,
      );
      const update = sql<{ part: number }>`UPDATE log_cursors SET seq = m.seq, updated_at = ${now} FROM (${moves}) AS m
        WHERE log_cursors.sink = ${sink} AND log_cursors.part = m.part AND log_cursors.lease_owner = ${owner}
        RETURNING log_cursors.part`;
      const moved = await executeUnsynced(database, { compile: () => update.compile(db), execute: async () => (await update.execute(db)).rows });
      if (!mark) return;
      const stored = new Set(moved.map((row) => Number(row.part)));
      const marks = cursors.filter(({ part }) => stored.has(part)).map(({ part, seq }) => ({ sink, part, seq, at: now }));
      if (marks.length > 0) await executeUnsynced(database, db.insertInto('log_marks').values(marks));
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
