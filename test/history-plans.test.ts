import BetterSqlite3 from 'better-sqlite3';
import { Kysely, SqliteDialect, type CompiledQuery } from 'kysely';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Database } from '../src/store/engines/database.js';
import { listBoxes } from '../src/store/state/boxes.js';
import { listEvents, type EventQuery } from '../src/store/state/events.js';
import { queueReplay } from '../src/store/exceptions/replay.js';
import { pruneExpired } from '../src/store/retention/prune.js';
import { openMigrated } from '../src/store/engines/migrate.js';
import type { Schema } from '../src/store/schema.js';
import { acceptedCounts, sinkCounts, statsWindow } from '../src/store/state/stats.js';
import { statementCache } from '../src/store/engines/statement-cache.js';
import { sqliteFile } from './support/databases.js';

/**
 * Which index each events listing takes on SQLite, which keeps no statistics: with millions of
 * deliveries stored, a listing without one is a scan of the whole history that stalls the receive
 * path (bench/explain-queries.ts measures it).
 */
describe('the events listing on a migrated SQLite database', () => {
  let file: string;
  let sqlite: BetterSqlite3.Database;
  let kysely: Kysely<Schema>;
  let compiled: CompiledQuery[];
  beforeEach(async () => {
    file = sqliteFile();
    await (await openMigrated({ url: file })).database.close();
    sqlite = new BetterSqlite3(file);
    compiled = [];
    kysely = new Kysely<Schema>({
      dialect: new SqliteDialect({ database: sqlite }),
      log: (event) => {
        if (event.level === 'query') compiled.push(event.query);
      },
    });
  });
  afterEach(() => kysely.destroy());

  const planOf = async (query: Omit<EventQuery, 'limit'>): Promise<string> => {
    await listEvents(kysely, { ...query, limit: 51 });
    return planOfLast();
  };
  const planOfLast = (): string => planOfQuery(compiled.at(-1) as CompiledQuery);
  const planOfQuery = ({ sql, parameters }: CompiledQuery): string => {
    const rows = sqlite.prepare(`EXPLAIN QUERY PLAN ${sql}`).all(...parameters) as { detail: string }[];
    return rows.map((r) => r.detail).join('; ');
  };
  const before = { receivedAt: 1_700_000_000_000, id: 'evt_00000000000000000000000000000000' };

  it('by type uses the type index, also for the next page', async () => {
    expect(await planOf({ type: 'box.error' })).toMatch(/USING INDEX deliveries_type \(type=\?\)/);
    expect(await planOf({ type: 'box.error', before })).toMatch(/USING INDEX deliveries_type \(type=\? AND received_at<\?\)/);
  });

  it('by box uses the box index, also when a type and a time are given', async () => {
    expect(await planOf({ boxKeys: ['bx_1'] })).toMatch(/USING INDEX deliveries_box_id \(box_id=\?\)/);
    expect(await planOf({ boxKeys: ['bx_1'], before })).toMatch(/USING INDEX deliveries_box_id \(box_id=\? AND received_at<\?\)/);
    expect(await planOf({ boxKeys: ['bx_1'], type: 'box.error', since: 1 })).toMatch(/USING INDEX deliveries_box_id \(box_id=\? AND received_at>\?\)/);
  });

  it("by box across accounts (the box's key in each) and by account still take an index", async () => {
    expect(await planOf({ boxKeys: ['bx_1', 'prod:bx_1', 'staging:bx_1'], type: 'box.error' })).toMatch(/USING INDEX deliveries_box_id \(box_id=\?\)/);
    expect(await planOf({ account: 'prod', bytewise: true, type: 'box.error', before })).toMatch(/USING INDEX deliveries_type \(type=\? AND received_at<\?\)/);
    expect(await planOf({ account: 'default' })).toMatch(/SCAN deliveries USING INDEX deliveries_received_at/);
  });

  it("lists one named account's boxes as one range of their ids' index", async () => {
    await listBoxes(kysely, { account: 'prod', bytewise: true, afterId: 'prod:bx_1', limit: 51 });
    expect(planOfLast()).toMatch(/SEARCH boxes USING INDEX sqlite_autoindex_boxes_1 \(id>\? AND id<\?\)/);
  });

  it('a replay pages through the receipt time index and probes each event\'s own rows, never reading the history or the outbox', async () => {
    const prepared: string[] = [];
    const cache = statementCache(sqlite);
    const prepare = (text: string) => {
      prepared.push(text);
      return cache(text);
    };
    const database: Database = { dialect: 'sqlite', kysely, sqlite, prepare, synchronous: 'FULL', close: () => kysely.destroy() };
    await kysely
      .insertInto('deliveries')
      .values({ id: 'evt_1', type: 'box.error', box_id: 'bx_1', created_at: 'x', received_at: 1, attempt: 1, payload: '{}', origin: null, seq: null, sinks: 'alerts', trace_parent: null })
      .execute();
    expect(await queueReplay(database, { since: 1, now: 2, sinksFor: () => [], configured: ['alerts'] })).toBe(1);
    const page = planOfLast();
    expect(page).toMatch(/USING INDEX deliveries_received_at \(received_at>\? AND received_at<\?\)/);
    expect(page).not.toMatch(/SCAN deliveries/);
    const insert = prepared.find((text) => text.startsWith('insert into "outbox"')) as string;
    const plan = (sqlite.prepare(`EXPLAIN QUERY PLAN ${insert}`).all(...insert.split('?').slice(1).map(() => null)) as { detail: string }[])
      .map((r) => r.detail)
      .join('; ');
    expect(plan).toMatch(/SEARCH d USING INDEX sqlite_autoindex_deliveries_1 \(id=\?\)/);
    expect(plan).toMatch(/SEARCH o USING INDEX outbox_delivery \(delivery_id=\?\)/);
    expect(plan).not.toMatch(/SCAN (deliveries|d|outbox|o)\b/);
  });

  it('retention finds expired deliveries by receipt time and reads the boxes in windows of their primary key, never the whole of either', async () => {
    const database: Database = { dialect: 'sqlite', kysely, sqlite, prepare: statementCache(sqlite), synchronous: 'FULL', close: () => kysely.destroy() };
    // More boxes than one window of batches of 1 (100), so the pass moves on from a window's end.
    await kysely
      .insertInto('boxes')
      .values(Array.from({ length: 150 }, (_, i) => ({ id: `bx_${String(i).padStart(3, '0')}`, state: 'ready', last_seen_at: i % 40 === 0 ? 1 : 2e12 })))
      .execute();
    await kysely
      .insertInto('deliveries')
      .values({ id: 'evt_1', type: 'box.ready', box_id: 'bx_000', created_at: 'x', received_at: 1, attempt: 1, payload: '{}', origin: null, seq: null, sinks: null, trace_parent: null })
      .execute();
    await pruneExpired(database, { now: 1e12, retentionDays: 1, batchSize: 1 });
    const plans = compiled.filter((q) => /\b(deliveries|boxes)\b/.test(q.sql) && /^select/i.test(q.sql)).map((q) => `${q.sql}\n  -> ${planOfQuery(q)}`);
    expect(plans.filter((p) => /-> (.*; )?SCAN (deliveries|d|boxes|b)\b(?! USING (COVERING )?INDEX sqlite_autoindex_boxes_1$)/.test(p))).toEqual([]);
    expect(plans.find((p) => /"d"\."received_at" </.test(p))).toMatch(/SEARCH d USING INDEX deliveries_received_at \(received_at<\?\)/);
    const windows = plans.filter((p) => /"b"\."id" > \? and "b"\."id" <= \?/.test(p));
    expect(windows.length).toBeGreaterThan(0);
    for (const window of windows) expect(window).toMatch(/SEARCH b USING INDEX sqlite_autoindex_boxes_1 \(id>\? AND id<\?\)/);
  });

  it('unfiltered and since a time use the receipt time index', async () => {
    expect(await planOf({})).toMatch(/SCAN deliveries USING INDEX deliveries_received_at/);
    expect(await planOf({ since: 1, before })).toMatch(/USING INDEX deliveries_received_at \(received_at>\? AND received_at<\?\)/);
  });

  it('the stats of a day count received events per type over the type index only (covering), never the whole history', async () => {
    const day = statsWindow(1_700_000_000_000 - 86_400_000, 1_700_000_000_000, 60_000);
    await acceptedCounts(kysely, day);
    const plan = planOfLast();
    expect(plan).toMatch(/USING COVERING INDEX deliveries_type \(type=\? AND received_at>\? AND received_at<\?\)/);
    expect(plan).not.toMatch(/SCAN (deliveries|d)\b/);
    await sinkCounts(kysely, day);
    expect(planOfLast()).toMatch(/SEARCH sink_minutes USING (COVERING )?INDEX sqlite_autoindex_sink_minutes_1 \(minute>\? AND minute<\?\)/);
  });
});
