import { existsSync } from 'node:fs';
import { clearLine, cursorTo } from 'node:readline';
import { Command } from 'commander';
import type { Config } from '../config/schema.js';
import { CopyTargetNotEmptyError, copyStore, countKinds, targetHoldings, type CopyProgress, type KindCount } from '../store/copy/copy-store.js';
import { databaseOptionsOf, isPostgresUrl, type Database } from '../store/engines/database.js';
import { migrateChecked, openMigrated, openReachable } from '../store/engines/migrate.js';
import { acquireWriterLock } from '../store/engines/writer-lock.js';
import { exitMisconfigured } from './misconfigured.js';

/** On a terminal, one line rewritten as rows are copied; elsewhere (logs, CI) nothing until the counts. */
function progressLine(stream: NodeJS.WriteStream): { show(progress: CopyProgress): void; end(): void } {
  if (!stream.isTTY) return { show: () => {}, end: () => {} };
  const clear = () => {
    clearLine(stream, 0);
    cursorTo(stream, 0);
  };
  return {
    show: ({ label, copied, total }) => {
      clear();
      stream.write(`copying ${label}: ${copied} of ${total}`);
    },
    end: clear,
  };
}

function formatCounts(counts: KindCount[]): string {
  const width = Math.max(4, ...counts.map((count) => count.label.length));
  const line = (label: string, source: string, target: string) => `${label.padEnd(width)}  ${source.padStart(8)}  ${target.padStart(8)}`;
  return [line('KIND', 'SOURCE', 'TARGET'), ...counts.map((c) => line(c.label, String(c.source), String(c.target)))].join('\n');
}

function sqliteOf(database: Database): Database & { dialect: 'sqlite' } {
  if (database.dialect !== 'sqlite') throw new Error('the source is not SQLite');
  return database;
}

function postgresOf(database: Database): Database & { dialect: 'postgres' } {
  if (database.dialect !== 'postgres') throw new Error('the target is not PostgreSQL');
  return database;
}

/**
 * Copies the configured SQLite database into the PostgreSQL database at `to` (contract section 13)
 * while holding the source's writer lock, so no relay serves it meanwhile. Returns the counts.
 */
async function copyToPostgres(config: Config, to: string, resume: boolean): Promise<KindCount[]> {
  const lock = acquireWriterLock(config.database);
  try {
    const target = postgresOf(await openReachable({ url: to }));
    try {
      // Checked before the target is migrated, so a refusal writes nothing.
      const holds = resume ? [] : await targetHoldings(target);
      if (holds.length > 0) throw new CopyTargetNotEmptyError(to, holds);
      await migrateChecked(target, to);
      const { database } = await openMigrated(databaseOptionsOf(config));
      const source = sqliteOf(database);
      try {
        const progress = progressLine(process.stderr);
        await copyStore({ source, target, onProgress: progress.show });
        progress.end();
        return await countKinds(source, target);
      } finally {
        await source.close();
      }
    } finally {
      await target.close();
    }
  } finally {
    lock.release();
  }
}

/** `boxrelay store copy --to <postgres url> [--resume]`. */
export function storeCommand(loadConfig: () => Config): Command {
  const store = new Command('store').description('move what the relay keeps between databases');
  store
    .command('copy')
    .description('with the relay stopped, copy everything it keeps from its SQLite database to PostgreSQL (migrated first)')
    .requiredOption('--to <url>', 'the PostgreSQL database, postgres://user:password@host:5432/database')
    .option('--resume', 'continue an interrupted copy into a target that already holds part of it')
    .action(async (options: { to: string; resume?: boolean }) => {
      const config = loadConfig();
      if (isPostgresUrl(config.database)) {
        exitMisconfigured('store copy copies from a SQLite database, and BOXRELAY_DATABASE names PostgreSQL: set it to the SQLite file');
      }
      if (!isPostgresUrl(options.to)) exitMisconfigured(`--to must be a postgres:// or postgresql:// URL`);
      if (!existsSync(config.database)) exitMisconfigured(`there is no SQLite database at ${config.database} (BOXRELAY_DATABASE)`);
      const counts = await copyToPostgres(config, options.to, options.resume === true);
      console.log(formatCounts(counts));
      const differ = counts.filter((count) => count.source !== count.target);
      if (differ.length > 0) {
        process.stderr.write(`boxrelay: source and target counts differ: ${differ.map((c) => `${c.label} ${c.source} / ${c.target}`).join(', ')}\n`);
        process.exitCode = 1;
      }
    });
  return store;
}
