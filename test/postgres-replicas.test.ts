import { sql } from 'kysely';
import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { configSchema } from '../src/config/schema.js';
import { createRelay } from '../src/main.js';
import { migrations } from '../migrations/index.js';
import { postgresSchema } from './support/databases.js';
import { captureLogs } from './support/log-capture.js';
import { SECRET } from './support/sign.js';

describe('replicas on one PostgreSQL schema', () => {
  it('start together on an empty schema: the migrations run once and every relay comes up', async () => {
    const database = await postgresSchema();
    const config = configSchema.parse({ fanoutThread: 'inline', database, secrets: [SECRET] });
    const start = () => createRelay({ config, logger: captureLogs().logger, registry: new Registry() });
    const relays = await Promise.all([start(), start(), start()]);
    try {
      const db = relays[0]!.store.database.kysely;
      const { rows } = await sql<{ name: string }>`SELECT name FROM kysely_migration ORDER BY name`.execute(db);
      expect(rows.map((r) => r.name)).toEqual(Object.keys(migrations));
      // Each relay writes through its own pool into the same tables.
      for (const relay of relays) expect(await relay.store.checkWritable(Date.now())).toBe(true);
      const { rows: tables } = await sql<{ n: number }>`SELECT count(*)::int AS n FROM information_schema.tables WHERE table_schema = current_schema()`.execute(db);
      expect(tables[0]?.n).toBe(22); // twenty relay tables and Kysely's two
    } finally {
      await Promise.all(relays.map((relay) => relay.stop()));
    }
  });
});
