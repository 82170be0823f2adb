import { Command } from 'commander';
import type { Config } from '../config/schema.js';
import { backupSqlite } from '../store/copy/backup.js';
import { isPostgresUrl } from '../store/engines/database.js';
import { exitMisconfigured } from './misconfigured.js';

/** `boxrelay backup <file>` (contract section 13): a checked copy of the SQLite database, taken while the relay serves. */
export function backupCommand(loadConfig: () => Config): Command {
  return new Command('backup')
    .description('write a consistent, checked copy of the SQLite database while the relay serves (PostgreSQL: use pg_dump)')
    .argument('<file>', 'where the copy goes (replaced once the copy is checked)')
    .action(async (file: string) => {
      const config = loadConfig();
      if (isPostgresUrl(config.database)) {
        exitMisconfigured(
          'backup copies a SQLite database; BOXRELAY_DATABASE names PostgreSQL: back it up with pg_dump ' +
            '(e.g. pg_dump --format=custom --file=boxrelay.dump "$BOXRELAY_DATABASE")',
        );
      }
      const result = await backupSqlite(config.database, file);
      console.log(JSON.stringify({ ok: true, ...result }));
    });
}
