import { sql } from 'kysely';
import { beforeAll, describe, expect, it } from 'vitest';
import { migrations } from '../migrations/index.js';
import { appliedMigrations, createMigrator } from '../src/store/engines/migrate.js';
import { databaseLocation, openDatabase } from '../src/store/engines/database.js';
import { engines } from './support/databases.js';
import { requireBuild, runCli } from './support/process.js';
import { SECRET } from './support/sign.js';

beforeAll(requireBuild);

const FUTURE = '999_from_a_newer_relay';
const names = Object.keys(migrations);

/**
 * A database migrated by every migration but the last one this relay knows, that also records a
 * migration this relay does not know (as a newer relay would have left it): whatever is refused
 * must leave the last known migration unapplied.
 */
async function migratedByANewerRelay(url: string): Promise<void> {
  const database = openDatabase({ url });
  try {
    const { error } = await (await createMigrator(database)).migrateTo(names.at(-2)!);
    if (error) throw error;
    await sql`INSERT INTO kysely_migration (name, timestamp) VALUES (${FUTURE}, ${new Date().toISOString()})`.execute(database.kysely);
  } finally {
    await database.close();
  }
}

async function applied(url: string): Promise<string[]> {
  const database = openDatabase({ url });
  try {
    return await appliedMigrations(database);
  } finally {
    await database.close();
  }
}

describe.each(engines)('a database a newer relay migrated, on $name', (engine) => {
  it.each([['serve'], ['migrate']])('%s exits 2 naming the unknown migration, and applies nothing', async (command) => {
    const url = await engine.url();
    await migratedByANewerRelay(url);
    const before = await applied(url);
    expect(before).toEqual([...names.slice(0, -1), FUTURE]);

    const result = await runCli([command], { BOXRELAY_DATABASE: url, BOXRELAY_SECRETS: SECRET, PORT: '0', BOXRELAY_INTERNAL_PORT: '0', HOST: '127.0.0.1' });
    expect(result).toEqual({
      code: 2,
      stdout: '',
      stderr:
        `boxrelay: the database (BOXRELAY_DATABASE: ${databaseLocation(url)}) holds migration ${FUTURE}, which this boxrelay does not know: ` +
        'a newer boxrelay migrated it; run that version or a newer one (this one never runs on a schema it does not understand)\n',
    });
    expect(await applied(url)).toEqual(before);
  });
});
