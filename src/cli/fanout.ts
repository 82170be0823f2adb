import { Command, InvalidArgumentError } from 'commander';
import { CLI_ACTOR, createAuditTrail } from '../audit-trail.js';
import { systemClock } from '../clock.js';
import type { Config } from '../config/schema.js';
import { createOperations, type Operations } from '../dispatch/operations.js';
import { filterErrorReporter } from '../sinks/filter-errors.js';
import { configuredSinks, sinkRouterOf } from '../sinks/route.js';
import { createFanoutStore } from '../store/fanout-store.js';
import { type DeadLetter } from '../store/exceptions/rows.js';
import { NotFoundError } from '../errors.js';
import { createLogger } from '../log.js';
import { keyOfAccountId } from '../store/account-keys.js';
import { accountOption, accountOrExit } from './account-option.js';
import { withDatabase } from './database.js';
import { exitMisconfigured } from './misconfigured.js';

/**
 * Works on the database directly, so no server needs to run; a running server takes up retried
 * and replayed rows at its next poll.
 */
function withOperations<T>(config: Config, fn: (operations: Operations) => Promise<T>): Promise<T> {
  return withDatabase(config, ({ database }) =>
    fn(
      createOperations({
        exceptions: createFanoutStore(database).exceptions,
        sinks: configuredSinks(config),
        sinksFor: sinkRouterOf(config, filterErrorReporter({ clock: systemClock, logger: createLogger(config.logLevel, process.stderr) })),
        clock: systemClock,
        // The one log line of each change goes to stderr, beside the command's own output on stdout.
        trail: createAuditTrail({ clock: systemClock, logger: createLogger(config.logLevel, process.stderr) }),
      }),
    ),
  );
}

/**
 * Commands that send need the server's sinks: without them a retry or replay would queue nothing
 * and look like success.
 */
function withSinks(config: Config, command: string): Config {
  if (configuredSinks(config).length === 0) {
    exitMisconfigured(
      `${command} needs the server's sinks: set a bus URL (e.g. BOXRELAY_NATS_URL=nats://127.0.0.1:4222) or ` +
        'BOXRELAY_HOOKS_FILE (e.g. /etc/boxrelay/hooks/hooks.yaml) as the server has them',
    );
  }
  return config;
}

function wholeNumber(value: string): number {
  if (!/^\d{1,15}$/.test(value)) throw new InvalidArgumentError('expected a whole number');
  return Number(value);
}

function limitOption(value: string): number {
  const limit = wholeNumber(value);
  if (limit < 1 || limit > 1000) throw new InvalidArgumentError('expected 1 to 1000');
  return limit;
}

const plural = (count: number, one: string, many = `${one}s`) => `${count} ${count === 1 ? one : many}`;

function printDeadLetters(rows: DeadLetter[], json: boolean): void {
  if (json) {
    for (const d of rows) console.log(JSON.stringify({ ...d, failedAt: new Date(d.failedAt).toISOString() }));
    return;
  }
  console.log(['ID', 'SINK', 'ATTEMPTS', 'FAILED AT', 'EVENT', 'LAST ERROR'].join('\t'));
  for (const d of rows) {
    console.log([d.id, d.sink, d.attempts, new Date(d.failedAt).toISOString(), d.eventId, d.lastError ?? ''].join('\t'));
  }
}

interface TargetOptions {
  all?: boolean;
  sink?: string;
}

/** `<id>` or `--all [--sink]`, never both or neither. */
function target(id: number | undefined, options: TargetOptions): number | undefined {
  if ((id === undefined) === !options.all) throw new InvalidArgumentError('give a dead letter id, or --all (optionally with --sink)');
  if (id !== undefined && options.sink !== undefined) throw new InvalidArgumentError('--sink goes with --all');
  return id;
}

/** `boxrelay dead-letters list|retry|discard`, `boxrelay replay` and `boxrelay events resend`. */
export function fanoutCommands(loadConfig: () => Config): Command[] {
  const deadLetters = new Command('dead-letters').description('list, retry or discard events a sink gave up on');
  deadLetters
    .command('list')
    .description('list dead letters, oldest first')
    .option('--sink <name>', 'only this sink')
    .option('--limit <n>', 'at most this many (1-1000)', limitOption, 100)
    .option('--after <id>', 'those after this id (the next page)', wholeNumber)
    .option('--json', 'one JSON object a line')
    .action((options: { sink?: string; limit: number; after?: number; json?: boolean }) =>
      withOperations(loadConfig(), async (operations) => {
        const rows = await operations.list({ sink: options.sink, after: options.after, limit: options.limit + 1 });
        printDeadLetters(rows.slice(0, options.limit), options.json === true);
        const last = rows[options.limit - 1];
        if (rows.length > options.limit && last && !options.json) console.error(`more: --after ${last.id}`);
      }),
    );
  /** `retry` and `discard`: one dead letter by id, or `--all` of them (of one `--sink`). */
  const onDeadLetters = (verb: 'retry' | 'discard', done: string, description: string, all: string) =>
    deadLetters
      .command(`${verb} [id]`)
      .description(description)
      .option('--all', all)
      .option('--sink <name>', 'with --all: only this sink')
      .action((id: string | undefined, options: TargetOptions) =>
        withOperations(verb === 'retry' ? withSinks(loadConfig(), 'dead-letters retry') : loadConfig(), async (operations) => {
          const one = target(id === undefined ? undefined : wholeNumber(id), options);
          const count = one === undefined ? await operations[`${verb}All`](options.sink, CLI_ACTOR) : (await operations[verb](one, CLI_ACTOR), 1);
          console.log(`${done} ${plural(count, 'dead letter')}`);
        }),
      );
  onDeadLetters('retry', 'retried', 'queue dead letters again with a fresh attempt budget', 'every dead letter (of configured sinks)');
  onDeadLetters('discard', 'discarded', 'give up on dead letters for good (each event then reads discarded for that sink)', 'every dead letter');

  const replay = new Command('replay')
    .description('send the stored deliveries received since a time again (same event ids)')
    .requiredOption('--since <time>', 'ISO 8601 time with a zone, e.g. 2026-11-21T10:00:00Z')
    .option('--sink <name>', 'only this sink (still within its event filter)')
    .action((options: { since: string; sink?: string }) =>
      withOperations(withSinks(loadConfig(), 'replay'), async (operations) => {
        console.log(`queued ${plural(await operations.replay(options, CLI_ACTOR), 'sink delivery', 'sink deliveries')}`);
      }),
    );
  const events = new Command('events').description('act on one stored event');
  events
    .command('resend <id>')
    .description("send one stored event to one sink again, whatever its status there (a fresh attempt budget)")
    .requiredOption('--sink <name>', 'the configured sink to send it to')
    .addOption(accountOption('the account the event id is of (contract section 21)'))
    .action(async (id: string, options: { sink: string; account: string }) => {
      const config = withSinks(loadConfig(), 'events resend');
      // As POST /admin/events/:id/resend?account=: the upstream's id, never another account's stored key.
      const key = keyOfAccountId(accountOrExit(config, options.account), id);
      if (key === undefined) throw new NotFoundError('no such event');
      await withOperations(config, async (operations) => {
        await operations.resend(key, options.sink, CLI_ACTOR);
        console.log(`queued ${id} for ${options.sink}`);
      });
    });
  return [deadLetters, replay, events];
}
