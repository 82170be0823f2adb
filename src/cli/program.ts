import { Command, InvalidArgumentError, Option } from 'commander';
import { loadConfig, ConfigError } from '../config/load.js';
import type { Config } from '../config/schema.js';
import { ReconcileNotConfiguredError, RelayError } from '../errors.js';
import { createLogger, logDestination } from '../log.js';
import { NoSecretError, createRelay } from '../main.js';
import { describePrune, pruneExpired } from '../store/retention/prune.js';
import { systemClock } from '../clock.js';
import { duration } from '../config/schema.js';
import { createUpstreamClient, type UpstreamClient } from '../upstream/client.js';
import { createTracing, TracingConfigError, type Tracing } from '../tracing/tracing.js';
import { SecretCipherError } from '../upstream/secret-cipher.js';
import { writerLockFor } from '../store/engines/writer-lock.js';
import { backupCommand } from './backup.js';
import { withDatabase } from './database.js';
import { fanoutCommands } from './fanout.js';
import { configCommand } from './config-check.js';
import { exitInvalidConfig, exitMisconfigured } from './misconfigured.js';
import { accountOption, accountOrExit } from './account-option.js';
import { reconcileOnce } from './reconcile.js';
import { sendTest } from './send-test.js';
import { startSummary } from './start-summary.js';
import { storeCommand } from './store-copy.js';
import { packageVersion } from '../package-version.js';
import {
  UpstreamNotConfiguredError,
  listWebhooks,
  openUpstreamSecrets,
  parseEvents,
  registerWebhook,
  rotateWebhook,
  upstreamSettings,
  type UpstreamSecrets,
  type UpstreamStoreDeps,
} from './upstream.js';

/** Errors a user can act on end the command with their message, one line, and exit code 1. */
export class UsageFailure extends RelayError {
  readonly code = 'invalid_usage';
}

function configOrExit(): Config {
  try {
    return loadConfig({ env: process.env });
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    exitInvalidConfig(error.problems);
  }
}

/** Tracing from the OTEL_* variables; a setting it cannot use is a configuration error (exit 2). */
function tracingOrExit(): Tracing {
  try {
    return createTracing(process.env);
  } catch (error) {
    if (!(error instanceof TracingConfigError)) throw error;
    exitInvalidConfig([error.message]);
  }
}

async function serve(): Promise<void> {
  const config = configOrExit();
  // One process serves a SQLite file (contract section 13): held from before it is opened until it is closed.
  const lock = writerLockFor(config.database);
  const destination = logDestination(process.stdout.fd);
  // pino writes what is still buffered at a normal exit only; a crash must not lose the lines before it.
  process.on('uncaughtExceptionMonitor', () => destination.flushSync());
  const logger = createLogger(config.logLevel, destination);
  const relay = await createRelay({
    config,
    logger,
    tracing: tracingOrExit(),
    // The graceful stop, then exit 1: whoever runs the relay (Kubernetes, systemd) starts it again.
    onFatal: () => {
      process.exitCode = 1;
      process.kill(process.pid, 'SIGTERM');
    },
  }).catch((error: unknown) => {
    // Settings, not faults: exit 2 like any other invalid configuration.
    if (error instanceof NoSecretError || error instanceof SecretCipherError) exitMisconfigured(error.message);
    throw error;
  });
  // The signal handlers are in place before the relay listens: a SIGTERM just after it can be reached
  // is a graceful stop, not the default exit that resets accepted connections.
  const started = relay.start();
  // A second signal during the delay ends it (an operator's second Ctrl-C, or a deliberate stop now).
  let endDelay: (() => void) | undefined;
  const shutdown = (signal: string) => {
    if (endDelay) {
      logger.info({ signal }, 'second signal: the shutdown delay, if still running, ends now');
      endDelay();
      return;
    }
    const delayMs = config.shutdownDelay;
    let timer: NodeJS.Timeout | undefined;
    const delayed = new Promise<void>((resolve) => {
      endDelay = resolve;
      timer = setTimeout(resolve, delayMs);
    });
    // Readiness turns 503 at once; the relay still serves what load balancers send while they notice.
    relay.drain();
    logger.info({ signal, delayMs }, 'shutting down');
    delayed
      .then(() => {
        clearTimeout(timer);
        logger.info('shutdown delay over; no longer listening once what was accepted is answered');
        return started.then(() => relay.stop());
      })
      .then(
        () => {
          lock?.release();
          // 0, or 1 after a fatal fault (onFatal).
          process.exit();
        },
        (error: unknown) => {
          logger.error({ err: error }, 'shutdown failed');
          process.exit(1);
        },
      );
  };
  process.on('SIGTERM', () => shutdown('SIGTERM'));
  process.on('SIGINT', () => shutdown('SIGINT'));
  const ports = await started;
  // For a person at a terminal, beside the JSON lines on stdout: what listens where and what is on.
  if (logger.isLevelEnabled('info')) for (const line of startSummary(config, ports, packageVersion())) process.stderr.write(`boxrelay: ${line}\n`);
}

async function migrate(): Promise<void> {
  const results = await withDatabase(configOrExit(), async ({ migrations }) => migrations);
  if (results.length === 0) console.log('database is up to date');
  for (const result of results) console.log(`${result.migrationName}: ${result.status}`);
}

/** The retention run of `serve`, once, now; safe beside running replicas (idempotent deletes). */
async function prune(options: { days?: number }): Promise<void> {
  const config = configOrExit();
  if (options.days === 0) throw new UsageFailure('--days must be at least 1');
  const result = await withDatabase(config, ({ database }) =>
    pruneExpired(database, { now: Date.now(), retentionDays: options.days ?? config.retentionDays }),
  );
  console.log(describePrune(result));
  if (result.failedSteps.length > 0) process.exitCode = 1;
}

function upstreamClient(config: Config, account: string): UpstreamClient {
  try {
    return createUpstreamClient({
      ...upstreamSettings(config, account),
      onRetry: ({ attempt, error }) => process.stderr.write(`boxrelay: ${error.message}; trying again (attempt ${attempt})\n`),
    });
  } catch (error) {
    // TypeError: a malformed base URL or API key, refused before any request.
    if (error instanceof UpstreamNotConfiguredError || error instanceof TypeError) exitMisconfigured(error.message);
    throw error;
  }
}

/**
 * Runs a command that stores the account's secrets: the database is opened (and migrated) before the
 * upstream is called.
 */
async function withSecrets(name: string, run: (deps: UpstreamStoreDeps) => Promise<unknown>): Promise<void> {
  const config = configOrExit();
  const account = accountOrExit(config, name);
  const client = upstreamClient(config, account);
  const logger = createLogger(config.logLevel, process.stderr);
  // Where else the account's secrets are set, for the rotation's note: `default`'s variables, or its own list and file.
  const settings = config.accounts.find((a) => a.name === account) ?? config;
  let opened: UpstreamSecrets;
  try {
    opened = await openUpstreamSecrets(config, systemClock, logger, account);
  } catch (error) {
    if (error instanceof SecretCipherError) exitMisconfigured(error.message);
    throw error;
  }
  try {
    await run({ account, client, secrets: opened.secrets, cipher: opened.cipher, clock: systemClock, config: settings, print: (line) => console.log(line) });
  } finally {
    await opened.close();
  }
}

function parseGrace(text: string): { ms: number; text: string } {
  const parsed = duration.safeParse(text);
  if (!parsed.success) throw new InvalidArgumentError('expected a duration such as 30s, 10m, 1h or 1d');
  return { ms: parsed.data, text };
}

function positiveInt(value: string): number {
  if (!/^\d+$/.test(value)) throw new InvalidArgumentError('expected a whole number');
  return Number(value);
}

/** The `boxrelay` command line; building it runs nothing (src/cli/main.ts parses process.argv with it). */
export function buildProgram(): Command {
  const program = new Command('boxrelay')
    .description('Verify, store once and relay the Sandbox Service webhooks')
    .version(packageVersion(), '-V, --version', 'print the version of boxrelay')
    .showHelpAfterError();

  program.command('serve').description('migrate the database, then serve the receiver and the internal port').action(serve);
  program.command('migrate').description('apply pending database migrations and exit').action(migrate);
  program
    .command('prune')
    .description('remove deliveries and silent boxes older than the retention period, and expired secrets')
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

  const upstream = program
    .command('upstream')
    .description(
      'manage this relay\'s webhook endpoint at the Sandbox Service (BOXRELAY_UPSTREAM_BASE_URL, BOXRELAY_UPSTREAM_API_KEY; ' +
        'with --account, that account\'s upstreamBaseUrl and upstreamApiKey)',
    );
  const upstreamAccount = () => accountOption('the account (contract section 21) whose endpoint and secrets these are');
  upstream
    .command('list')
    .description('list the webhook endpoints of the account')
    .addOption(upstreamAccount())
    .action(async (options: { account: string }) => {
      const config = configOrExit();
      const account = accountOrExit(config, options.account);
      await listWebhooks({ account, client: upstreamClient(config, account), print: (line) => console.log(line) });
    });
  upstream
    .command('register')
    .description('create the webhook endpoint, store its secret in the database and print it once')
    .requiredOption('--url <url>', 'public HTTPS URL of the relay\'s POST /webhooks (/webhooks/<name> with --account)')
    .addOption(
      new Option('--events <list>', 'comma-separated event types, short form (ready) allowed')
        .argParser(parseEvents)
        .default(parseEvents(undefined), parseEvents(undefined).join(',')),
    )
    .option('--name <name>', 'endpoint name', 'boxrelay')
    .addOption(upstreamAccount())
    .action(async ({ account, ...options }: { url: string; events: string[]; name: string; account: string }) => {
      await withSecrets(account, (deps) => registerWebhook(deps, options));
    });
  upstream
    .command('rotate')
    .description('rotate the endpoint\'s secret: store the new one, keep accepting the old ones for the grace period')
    .argument('<webhookId>', 'wh_ followed by 24 hex characters')
    .addOption(
      new Option('--grace <duration>', 'how long the previous secrets stay accepted (30s, 10m, 1h, 1d)')
        .argParser(parseGrace)
        .default(parseGrace('1h'), '1h'),
    )
    .option('--show-secret', 'also print the new secret')
    .addOption(upstreamAccount())
    .action(async (webhookId: string, options: { grace: { ms: number; text: string }; showSecret?: boolean; account: string }) => {
      const { grace, showSecret = false } = options;
      await withSecrets(options.account, (deps) => rotateWebhook(deps, webhookId, { graceMs: grace.ms, graceText: grace.text, showSecret }));
    });

  program
    .command('reconcile')
    .description('repair from the Sandbox Service API what webhooks did not bring (contract section 9), once, now')
    .option('--dry-run', 'change nothing; list what a run would do')
    .addOption(accountOption('the account to reconcile (contract section 21)'))
    .action(async (options: { dryRun?: boolean; account: string }) => {
      const config = configOrExit();
      const account = accountOrExit(config, options.account);
      const tracing = tracingOrExit();
      const run = await reconcileOnce(config, createLogger(config.logLevel, process.stderr), tracing, { dryRun: options.dryRun ?? false, account }).finally(() =>
        tracing.shutdown(),
      );
      if (run === undefined) exitMisconfigured(new ReconcileNotConfiguredError(account).message);
      console.log(JSON.stringify(run, null, 2));
      if (run.outcome === 'failed') process.exitCode = 1;
    });

  for (const command of fanoutCommands(configOrExit)) program.addCommand(command);
  program.addCommand(backupCommand(configOrExit));
  program.addCommand(storeCommand(configOrExit));
  program.addCommand(configCommand(process.env));
  return program;
}
