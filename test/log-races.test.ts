import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { createFanoutStore } from '../src/store/fanout-store.js';
import { partOf } from '../src/store/log/position.js';
import { openStore, type Store } from '../src/store/store.js';
import { postgresSchema, sqliteFile } from './support/databases.js';
import { recordEvent, waitFor } from './support/fanout.js';

const T0 = Date.UTC(2026, 10, 26, 11, 0, 0);

const stores: Store[] = [];
afterEach(async () => {
  for (const store of stores.splice(0)) await store.close();
});

describe('setting aside the log of a sink no replica serves', () => {
  it('moves only the cursors it locked free: a partition released meanwhile keeps every entry (set aside or still to read)', async () => {
    const url = await postgresSchema();
    const store = await openStore({ url });
    stores.push(store);
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push(await recordEvent(store, { receivedAt: T0 + i, boxId: 'bx_gone', sinks: ['gone'] }));
    await store.sequenceLog();
    const part = partOf('bx_gone');
    const other = new pg.Client(url);
    await other.connect();
    try {
      // Another replica holds the partition.
      await other.query(
        `UPDATE log_cursors SET lease_owner = 'other', lease_until = floor(extract(epoch from clock_timestamp()) * 1000)::bigint + 3600000
         WHERE sink = 'gone' AND part = $1`,
        [part],
      );
      // The set-aside's insert of rows is held for a moment, and the other replica releases the partition then.
      await other.query(`CREATE FUNCTION slow_insert() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(1); RETURN NULL; END $$`);
      await other.query('CREATE TRIGGER slow_insert AFTER INSERT ON outbox FOR EACH STATEMENT EXECUTE FUNCTION slow_insert()');
      const setAside = createFanoutStore(store.database).exceptions.setAsideUnserved({ configured: [], graceMs: 0, now: T0 + 1000 });
      await waitFor(async () => {
        const { rows } = await other.query(`SELECT 1 FROM pg_stat_activity WHERE wait_event = 'PgSleep' AND query LIKE '%INSERT INTO outbox%'`);
        return rows.length > 0;
      }, 'the set-aside to write its rows');
      await other.query(`UPDATE log_cursors SET lease_owner = NULL, lease_until = NULL WHERE sink = 'gone' AND part = $1`, [part]);
      await setAside;

      const [cursor] = (await other.query<{ seq: string }>(`SELECT seq FROM log_cursors WHERE sink = 'gone' AND part = $1`, [part])).rows;
      const positions = (await other.query<{ id: string; seq: string }>('SELECT id, seq FROM deliveries')).rows;
      const setAsideIds = new Set((await other.query<{ delivery_id: string }>(`SELECT delivery_id FROM outbox WHERE status = 'set_aside'`)).rows.map((r) => r.delivery_id));
      for (const { id, seq } of positions) {
        expect(setAsideIds.has(id) || Number(seq) > Number(cursor!.seq), `${id} is set aside or still ahead of the cursor`).toBe(true);
      }
      expect(positions.map((p) => p.id).sort()).toEqual(ids.sort());
    } finally {
      await other.end();
    }
  });
});

describe('the SQLite writer', () => {
  it('knows a new sink has its cursors only once they commit: after a failed batch the next delivery makes them again', async () => {
    const store = await openStore({ url: sqliteFile() });
    stores.push(store);
    // A batch that fails after the cursors of its new sink were made in it (and rolled back with it).
    const { database } = store;
    if (database.dialect !== 'sqlite') throw new Error('a SQLite store was opened');
    database.sqlite.exec(`CREATE TRIGGER refuse BEFORE INSERT ON deliveries WHEN NEW.box_id = 'bx_refused' BEGIN SELECT RAISE(ABORT, 'refused'); END`);
    await expect(recordEvent(store, { receivedAt: T0, boxId: 'bx_refused', sinks: ['late'] })).rejects.toMatchObject({ code: 'storage_unavailable' });
    const id = await recordEvent(store, { receivedAt: T0 + 1, boxId: 'bx_ok', sinks: ['late'] });

    const db = store.database.kysely;
    const cursors = await db.selectFrom('log_cursors').select(['part', 'seq']).where('sink', '=', 'late').execute();
    expect(cursors).toHaveLength(16);
    const { seq } = await db.selectFrom('deliveries').select('seq').where('id', '=', id).executeTakeFirstOrThrow();
    // The delivery is after the cursor of its partition: the sink's lane will read it.
    expect(Number(cursors.find((c) => c.part === partOf('bx_ok'))!.seq)).toBeLessThan(Number(seq));
  });
});
