import { Kysely, PostgresDialect, sql, type CompiledQuery } from 'kysely';
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { openMigrated } from '../src/store/engines/migrate.js';
import type { Schema } from '../src/store/schema.js';
import { acceptedCounts, sinkCounts, statsWindow } from '../src/store/state/stats.js';
import { postgresSchema } from './support/databases.js';

const DAY = 86_400_000;
const NOW = Date.UTC(2026, 10, 21, 12, 0, 0);

/**
 * The stats query on PostgreSQL (SQLite's plan: test/history-plans.test.ts): with a few days of
 * deliveries stored and analysed, a day's counts come from the (type, received_at) index, and the
 * delivery counters from their primary key, never from a scan of the table.
 */
describe('the stats query plan on PostgreSQL', () => {
  let kysely: Kysely<Schema> | undefined;
  afterEach(() => kysely?.destroy());

  it('counts a day per type and bucket from the type index, and the sink counters by their key', async () => {
    const url = await postgresSchema();
    await (await openMigrated({ url })).database.close();
    const compiled: CompiledQuery[] = [];
    const pool = new pg.Pool({ connectionString: url, max: 1 });
    kysely = new Kysely<Schema>({ dialect: new PostgresDialect({ pool }), log: (event) => void (event.level === 'query' && compiled.push(event.query)) });
    // 60,000 deliveries over 6 days, 5 types; a minute of counters per sink over the same days.
    await sql`INSERT INTO deliveries (id, type, box_id, created_at, received_at, attempt, payload)
      SELECT 'evt_' || i, 'box.t' || (i % 5), 'bx_' || (i % 500), 'c', ${NOW - 6 * DAY}::bigint + i * 8640, 1, 'p' FROM generate_series(1, 60000) AS i`.execute(kysely);
    await sql`INSERT INTO sink_minutes (sink, minute, delivered, failed)
      SELECT s, ${NOW - 6 * DAY}::bigint + m * 60000, 1, 0 FROM generate_series(0, 8639) AS m CROSS JOIN (VALUES ('nats'), ('alerts')) AS sinks(s)`.execute(kysely);
    await sql`VACUUM ANALYZE deliveries`.execute(kysely);
    await sql`ANALYZE sink_minutes`.execute(kysely);
    const planOf = async (run: () => Promise<unknown>): Promise<string> => {
      await run();
      const { sql: text, parameters } = compiled.at(-1) as CompiledQuery;
      const { rows } = await pool.query<{ 'QUERY PLAN': string }>(`EXPLAIN ${text}`, parameters as unknown[]);
      return rows.map((r) => r['QUERY PLAN']).join('\n');
    };
    const day = statsWindow(NOW - DAY, NOW, 60_000);
    const accepted = await planOf(() => acceptedCounts(kysely!, day));
    expect(accepted).toMatch(/Index Only Scan using deliveries_type on deliveries d/);
    expect(accepted).not.toMatch(/Seq Scan on deliveries/);
    const sinks = await planOf(() => sinkCounts(kysely!, day));
    expect(sinks).toMatch(/Index (Only )?Scan using sink_minutes_pk on sink_minutes|Bitmap Index Scan on sink_minutes_pk/);
  });
});
