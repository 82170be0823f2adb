import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import { migrations } from '../migrations/index.js';
import { adminRelayPerTest } from './support/admin.js';
import { engines } from './support/databases.js';

const { version } = JSON.parse(readFileSync(join(import.meta.dirname, '..', 'package.json'), 'utf8')) as { version: string };
const newest = Object.keys(migrations).sort().at(-1);

describe.each(engines)('GET /admin/version on $name', (engine) => {
  const current = adminRelayPerTest(engine.url);

  it('answers the version of package.json, the newest migration applied and the Node.js that runs it', async () => {
    const response = await current.admin.get('/admin/version');
    expect(response.status).toBe(200);
    expect(response.body).toEqual({ ok: true, version, schema: newest, node: process.version });
  });

  it('reads the schema from the database on each request: a migration a newer relay applied shows', async () => {
    await sql`INSERT INTO kysely_migration (name, timestamp) VALUES ('999_from_a_newer_relay', ${new Date().toISOString()})`.execute(
      current.t.relay.store.database.kysely,
    );
    expect((await current.admin.get('/admin/version')).body).toMatchObject({ schema: '999_from_a_newer_relay' });
  });
});
