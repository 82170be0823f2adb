import { sql, type Kysely } from 'kysely';
import { runStatementTransaction } from '../engines/transactions.js';
import type { Database } from '../engines/database.js';
import { once } from '../engines/sqlite-writes.js';
import type { HeldAs } from '../exceptions/claims.js';
import type { Schema } from '../schema.js';

/** An item of an archive object: an event from the log (fenced by its partition's epoch), or an outbox row's version of one. */
export interface ArchiveItem {
  item: string;
  /** A log entry's partition as its lane holds it: recorded only while that holding stands. */
  heldAs?: HeldAs;
}

/** An object already recorded for some of the items asked: its key, and its bytes while S3 does not have it yet. */
export interface RecordedObject {
  key: string;
  /** gzip NDJSON as base64; null once written. */
  body: string | null;
  items: string[];
}

export type Recorded =
  | { recorded: true }
  /** Nothing was recorded: `elsewhere`, the objects that hold some of the items; `fenced`, items whose partition another holder took. */
  | { recorded: false; elsewhere: RecordedObject[]; fenced: string[] };

/** Which archive object holds each archived item (migration 023), for the S3 archive of every replica. */
export interface ArchiveLedger {
  /**
   * Records the object `key` (its bytes `body`, gzip NDJSON as base64) as the one that holds
   * `items`, all of them or none: none when another object holds one of them already, or when a log
   * item's partition was taken by another holder since.
   */
  record(object: { sink: string; key: string; body: string; items: ArchiveItem[]; now: number }): Promise<Recorded>;
  /** S3 has the object: its bytes are no longer kept. */
  written(key: string, now: number): Promise<void>;
}

export function createArchiveLedger(database: Database): ArchiveLedger {
  const db: Kysely<Schema> = database.kysely;
  const postgres = database.dialect === 'postgres';

  /** Every log item's partition still held under its epoch, read FOR SHARE on PostgreSQL (a take waits for this write or is seen by it). */
  const holdingsStand = (sink: string, items: ArchiveItem[]) => {
    const holdings = new Map(items.flatMap(({ heldAs }) => (heldAs ? [[`${heldAs.part}:${heldAs.epoch}`, heldAs] as const] : [])));
    const checks = [...holdings.values()].map(
      ({ part, owner, epoch }) =>
        sql<boolean>`EXISTS (SELECT 1 FROM log_cursors c WHERE c.sink = ${sink} AND c.part = ${part} AND c.lease_owner = ${owner} AND c.epoch = ${epoch}${sql.raw(postgres ? ' FOR SHARE' : '')})`,
    );
    return checks.length === 0 ? sql<boolean>`1 = 1` : sql.join(checks, sql` AND `);
  };

  return {
    async record({ sink, key, body, items, now }) {
      const names = items.map(({ item }) => item);
      const object = sql`INSERT INTO archive_objects (key, body, created_at)
        SELECT ${key}, ${body}, ${now}
        WHERE NOT EXISTS (SELECT 1 FROM archive_items WHERE item IN (${sql.join(names)})) AND ${holdingsStand(sink, items)}
        ON CONFLICT (key) DO NOTHING`;
      const members = db.insertInto('archive_items').values(names.map((item) => ({ item, object_key: key, created_at: now })));
      // The items go in only with their object: on PostgreSQL a writer that raced past the NOT EXISTS meets the primary key and fails whole.
      const [made] = await runStatementTransaction(database, [once(object.compile(db)), { ...once(members.compile()), ifChanged: 0 }]);
      if (made!.changed > 0) return { recorded: true };

      const held = await db.selectFrom('archive_items').select(['item', 'object_key']).where('item', 'in', names).execute();
      const keys = [...new Set(held.map((row) => row.object_key))];
      const objects = keys.length === 0 ? [] : await db.selectFrom('archive_objects').select(['key', 'body']).where('key', 'in', keys).execute();
      const elsewhere = objects.map(({ key: other, body: bytes }) => ({ key: other, body: bytes, items: held.filter((row) => row.object_key === other).map((row) => row.item) }));
      const recordedItems = new Set(held.map((row) => row.item));
      // Not held elsewhere, yet not recorded: a holding fell (or a race: the caller asks again and learns which).
      const fenced = held.length === 0 ? items.filter(({ heldAs }) => heldAs !== undefined).map(({ item }) => item) : [];
      return { recorded: false, elsewhere, fenced: fenced.filter((item) => !recordedItems.has(item)) };
    },

    async written(key, now) {
      await db.updateTable('archive_objects').set({ body: null, written_at: now }).where('key', '=', key).execute();
    },
  };
}
