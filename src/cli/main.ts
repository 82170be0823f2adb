import { Command, InvalidArgumentError } from 'commander';
import { loadConfig, ConfigError } from '../config/load.js';
import type { Config } from '../config/schema.js';
import { createLogger } from '../log.js';
import { createRelay } from '../main.js';
import { openDatabase } from '../store/database.js';
import { migrateToLatest } from '../store/migrate.js';
import { describePrune, pruneExpired } from '../store/prune.js';
import { sendTest } from './send-test.js';

/** Errors a user can act on end the command with their message, one line, and exit code 1. */
class UsageFailure extends Error {}

function configOrExit(): Config {
  try {
    return loadConfig({ env: process.env });
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    for (const problem of error.problems) process.stderr.write(`boxrelay: invalid configuration: ${problem}\n`);
    process.exit(2);
  }
}

async function serve(): Promise<void> {
  const config = configOrExit();
  const logger = createLogger(config.logLevel);
  const relay = await createRelay({ config, logger });
  await relay.start();
  let stopping = false;
  const shutdown = (signal: string) => {
    if (stopping) return;
    stopping = true;
    logger.info({ signal }, 'shutting down');
    relay.stop().then(
      () => process.exit(0),
      (error: unknown) => {
        logger.error({ err: error }, 'shutdown failed');
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', () => shutdown('SIGTERM'));
  process.on('SIGINT', () => shutdown('SIGINT'));
}

const openConfiguredDatabase = (config: Config) =>
  openDatabase({ url: config.database, sqliteSynchronous: config.sqliteSynchronous, busyTimeoutMs: config.busyTimeoutMs });

async function migrate(): Promise<void> {
  const database = openConfiguredDatabase(configOrExit());
  try {
    const results = (await migrateToLatest(database)) ?? [];
    if (results.length === 0) console.log('database is up to date');
    for (const result of results) console.log(`${result.migrationName}: ${result.status}`);
  } finally {
    await database.close();
  }
}

/** The retention run of `serve`, once, now; safe beside running replicas (idempotent deletes). */
async function prune(options: { days?: number }): Promise<void> {
  const config = configOrExit();
  if (options.days === 0) throw new UsageFailure('--days must be at least 1');
  const database = openConfiguredDatabase(config);
  try {
    await migrateToLatest(database);
    const result = await pruneExpired(database.kysely, { now: Date.now(), retentionDays: options.days ?? config.retentionDays });
    console.log(describePrune(result));
  } finally {
    await database.close();
  }
}

function positiveInt(value: string): number {
  if (!/^\d+$/.test(value)) throw new InvalidArgumentError('expected a whole number');
  return Number(value);
}

export function buildProgram(): Command {
  const program = new Command('boxrelay')
    .description('Verify, store once and relay the Sandbox Service webhooks')
    .showHelpAfterError();

  program.command('serve').description('migrate the database, then serve the receiver and the internal port').action(serve);
  program.command('migrate').description('apply pending database migrations and exit').action(migrate);
  program
    .command('prune')
    .description('remove deliveries, finished fan-out rows and silent boxes older than the retention period')
    .option('--days <n>', 'retention in days (default: BOXRELAY_RETENTION_DAYS)', positiveInt)
    .action(prune);
  program
    .command('send-test')
    .description('sign and post one delivery exactly as the Sandbox Service does')
    .option('--url <url>', 'receiver URL', 'http://127.0.0.1:8080/webhooks')
    .option('--secret <secret>', 'signing secret (default: the first of BOXRELAY_SECRETS)')
    .option('--type <type>', 'event type', 'box.ready')
    .option('--box <id>', 'box id', 'bx_test')
    .option('--name <name>', 'box name')
    .option('--timestamp <unixSeconds>', 'override X-Service-Timestamp', positiveInt)
    .action(async (options: { url: string; secret?: string; type: string; box: string; name?: string; timestamp?: number }) => {
      const secret = options.secret ?? process.env.BOXRELAY_SECRETS?.split(',')[0]?.trim();
      if (!secret) throw new UsageFailure('send-test needs --secret (or BOXRELAY_SECRETS)');
      const result = await sendTest({ ...options, secret });
      console.log(`${result.status} ${result.body}`);
      if (result.status < 200 || result.status > 299) process.exitCode = 1;
    });
  return program;
}

buildProgram()
  .parseAsync(process.argv)
  .catch((error: unknown) => {
    process.stderr.write(`boxrelay: ${(error as Error).message}\n`);
    process.exit(1);
  });
