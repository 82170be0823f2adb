import type { Kysely } from 'kysely';
import { afterEach, describe, expect, it } from 'vitest';
import { openDatabase, type Database } from '../src/store/engines/database.js';
import { createMigrator, migrateToLatest } from '../src/store/engines/migrate.js';
import { lastFinishedRun, lastRunStartedAt } from '../src/store/state/reconcile-runs.js';
import { createSecretsStore } from '../src/store/state/secrets-store.js';
import { createSecretCipher } from '../src/upstream/secret-cipher.js';
import { ManualClock } from './support/clock.js';
import { engines } from './support/databases.js';
import { captureLogs } from './support/log-capture.js';

describe.each(engines)('migration 024 on $name: runs and secrets stored before accounts are `default`’s', (engine) => {
  let database: Database | undefined;
  afterEach(async () => database?.close());

  it("gives every earlier run and secret to `default`, so its reports and endpoint keep them and no other account's do", async () => {
    database = openDatabase({ url: await engine.url() });
    const before = await (await createMigrator(database)).migrateTo('023_archive_ledger');
    expect(before.error).toBeUndefined();
    const report = { id: 'rec_old', startedAt: '2026-11-24T07:00:00.000Z', finishedAt: '2026-11-24T07:01:00.000Z', outcome: 'succeeded', boxesListed: 3 };
    // The tables as 023 left them, without the column this migration adds.
    const kysely = database.kysely as unknown as Kysely<Record<string, Record<string, unknown>>>;
    await kysely
      .insertInto('reconcile_runs')
      .values({ id: 'rec_old', started_at: Date.parse(report.startedAt), finished_at: Date.parse(report.finishedAt), outcome: 'succeeded', report: JSON.stringify(report) })
      .execute();
    await kysely.insertInto('secrets').values({ secret: 'whsec_b2xkLXNlY3JldA==', webhook_id: 'wh_old', created_at: 1, expires_at: null }).execute();

    await migrateToLatest(database);

    expect(await database.kysely.selectFrom('reconcile_runs').select(['id', 'account']).execute()).toEqual([{ id: 'rec_old', account: 'default' }]);
    expect(await lastFinishedRun(database.kysely, 'default')).toMatchObject({ id: 'rec_old', outcome: 'succeeded' });
    expect(await lastRunStartedAt(database.kysely, 'default')).toBe(Date.parse(report.startedAt));
    expect(await lastFinishedRun(database.kysely, 'prod')).toBeNull();
    expect(await lastRunStartedAt(database.kysely, 'prod')).toBeNull();
    const secrets = (account: string) =>
      createSecretsStore({ db: database!.kysely, account, cipher: createSecretCipher(undefined), clock: new ManualClock(), logger: captureLogs().logger }).list();
    expect(await secrets('default')).toEqual([{ value: 'whsec_b2xkLXNlY3JldA==', expiresAt: undefined }]);
    expect(await secrets('prod')).toEqual([]);
  });
});
