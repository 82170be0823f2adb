import { validateHeaderName, validateHeaderValue } from 'node:http';
import { z } from 'zod';
import type { ProxyEnv } from '../egress/proxy-env.js';
import { describeError } from '../errors.js';
import { untrusted } from '../log.js';
import { compileFilter } from '../sinks/filter.js';
import { hookTransformOf, type TransformedHook } from '../sinks/transform.js';
import { standardWebhooksKey } from '../verify/secrets.js';
import { DEFAULT_ACCOUNT } from './default-account.js';

const DURATION = /^(\d+)(ms|s|m|h|d)$/;
const UNIT_MS = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const;

/** "90s", "1h", "500ms" -> milliseconds. */
export const duration = z
  .string()
  .regex(DURATION, 'expected a duration such as 30s, 10m or 1h')
  .transform((text) => {
    const [, amount, unit] = DURATION.exec(text) as unknown as [string, string, keyof typeof UNIT_MS];
    return Number(amount) * UNIT_MS[unit];
  });

const zeroDuration = z.literal(['0', 0]).transform(() => 0);
/** A duration, or 0 for "none". */
const durationOrZero = z.union([zeroDuration, duration], { error: 'expected 0 or a duration such as 30s, 10m or 1h' });

const port = z.coerce.number().int().min(0).max(65535);
const positiveInt = z.coerce.number().int().positive();
const optionalText = z.string().min(1).optional();

/** A list given as a YAML list or as a comma-separated string (the form env vars allow). */
const stringList = z
  .union([z.array(z.string()), z.string()])
  .transform((value) => (Array.isArray(value) ? value : value.split(',')).map((s) => s.trim()).filter(Boolean));

/** The buses' sink names (src/sinks/buses.ts has one entry each): no hook may take one. */
export const BUS_NAMES = ['nats', 'amqp', 'redis', 'mqtt', 'kafka', 'sqs', 'sns', 's3'] as const;

const ordering = z.enum(['none', 'per-box']).default('none');

/** `true` or `false`, as YAML gives it or as env vars spell it. */
const flag = z.union([z.boolean(), z.enum(['true', 'false']).transform((text) => text === 'true')], { error: 'expected true or false' });

export const hookSchema = z.strictObject({
  name: z
    .string()
    .regex(/^[a-z0-9-]+$/, 'hook names use only a-z, 0-9 and -')
    .refine((name) => !(BUS_NAMES as readonly string[]).includes(name), `${BUS_NAMES.join(', ')} are the buses' sink names`),
  // Credentials in a URL would be refused by fetch and echoed in its error; use `headers` instead.
  url: z
    .url({ protocol: /^https?$/ })
    .refine((url) => !/^[a-z]+:\/\/[^/?#]*@/i.test(url), 'put credentials in headers (Authorization), not in the URL'),
  events: z.array(z.string().min(1)).min(1).default(['*']),
  format: z.enum(['cloudevents', 'slack', 'teams', 'discord', 'pagerduty']).default('cloudevents'),
  /** A CEL expression over `event` whose value is the body (contract section 17); only with `format: cloudevents`. */
  transform: z.string().min(1).optional(),
  /** The PagerDuty integration's routing key: required with `format: pagerduty`, and only there. */
  routingKey: z.string().min(1).optional(),
  /** The requests' Content-Type, in place of the one the format or the transform's value gives. */
  contentType: z.string().min(1).optional(),
  secret: z
    .string()
    .refine((secret) => standardWebhooksKey(secret) !== undefined, 'a hook secret is whsec_ followed by base64 (Standard Webhooks)')
    .optional(),
  headers: z.record(z.string(), z.string()).default({}),
  timeoutMs: positiveInt.default(5000),
  maxAttempts: positiveInt.max(100).default(8),
  /** Requests in flight to this hook at once (so events may arrive out of order when above 1, unless per-box). */
  concurrency: positiveInt.max(64).default(4),
  ordering,
  /** Failing every attempt this long pauses the hook; 0 never pauses. */
  pauseAfter: durationOrZero.default(600_000),
  /** `direct`, or an http(s) proxy URL; absent: HTTPS_PROXY / HTTP_PROXY / NO_PROXY (contract section 14). */
  proxy: z.string().optional(),
  /** PEM files: a CA to check the receiver against, a client certificate and key (mutual TLS). Read and checked at load. */
  tls: z.strictObject({ ca: optionalText, cert: optionalText, key: optionalText }).optional(),
  /** A CEL expression over `event`; the hook gets only events for which it is true. */
  filter: z.string().min(1).optional(),
  /** The accounts whose events the hook gets (contract section 21); absent: every account's. Checked against the accounts in `loadConfig`. */
  accounts: z.array(z.string().min(1)).min(1).optional(),
  /** Requests (first attempts and retries) started to this hook in any second, per process; absent: unlimited. */
  maxPerSecond: positiveInt.max(10_000).optional(),
}).superRefine((hook, ctx) => {
  checkHookHeaders(hook, ctx);
  checkHookProxy(hook, ctx);
  checkHookFilter(hook, ctx);
  checkHookTransform(hook, ctx);
});

/** `direct` or an http(s) URL; the problem names the hook, and never echoes the URL (it may hold proxy credentials). */
function checkHookProxy(hook: { name: string; proxy?: string | undefined }, ctx: z.RefinementCtx): void {
  if (hook.proxy === undefined || hook.proxy === 'direct') return;
  if (!z.url({ protocol: /^https?$/ }).safeParse(hook.proxy).success) {
    ctx.addIssue({ code: 'custom', path: ['proxy'], message: `hook ${hook.name}: proxy is "direct" or an http:// or https:// proxy URL` });
  }
}

/** A filter that does not compile is a configuration error naming the hook. */
function checkHookFilter(hook: { name: string; filter?: string | undefined }, ctx: z.RefinementCtx): void {
  if (hook.filter === undefined) return;
  try {
    compileFilter(hook.filter);
  } catch (error) {
    ctx.addIssue({ code: 'custom', path: ['filter'], message: `hook ${hook.name}: filter does not compile: ${describeError(error)}` });
  }
}

/**
 * A transform compiles, goes with the `cloudevents` format only (the others are transforms
 * already), and `routingKey` goes with `pagerduty`, which needs it. Problems name the hook.
 */
function checkHookTransform(hook: TransformedHook & { name: string }, ctx: z.RefinementCtx): void {
  const problem = (path: string, message: string) => ctx.addIssue({ code: 'custom', path: [path], message: `hook ${hook.name}: ${message}` });
  if (hook.transform !== undefined && hook.format !== 'cloudevents') problem('transform', `a transform makes the body: format ${hook.format} cannot go with it`);
  if (hook.format === 'pagerduty' && hook.routingKey === undefined) problem('routingKey', 'format pagerduty needs the routingKey of the PagerDuty integration');
  if (hook.format !== 'pagerduty' && hook.routingKey !== undefined) problem('routingKey', 'routingKey is for format pagerduty');
  if (hook.contentType !== undefined) {
    try {
      validateHeaderValue('content-type', hook.contentType);
    } catch {
      problem('contentType', 'contentType is not a valid HTTP header value');
    }
  }
  if (hook.transform === undefined) return;
  try {
    hookTransformOf(hook);
  } catch (error) {
    problem('transform', `transform does not compile: ${describeError(error)}`);
  }
}

/**
 * A hook's extra headers must be sendable: fetch would refuse them at every attempt with an error
 * that quotes the value (often a token). The problem names the hook and header, never the value.
 */
function checkHookHeaders(hook: { name: string; headers: Record<string, string> }, ctx: z.RefinementCtx): void {
  for (const [header, value] of Object.entries(hook.headers)) {
    const shown = JSON.stringify(untrusted(header));
    const problem = (message: string) => ctx.addIssue({ code: 'custom', path: ['headers'], message: `hook ${hook.name}, header ${shown}: ${message}` });
    try {
      validateHeaderName(header);
    } catch {
      problem('not a valid HTTP header name');
      continue;
    }
    try {
      validateHeaderValue(header, value);
    } catch {
      problem('the value is not a valid HTTP header value (no CR, LF, NUL or other control characters); the value is not shown');
    }
  }
}

export type HookConfig = z.infer<typeof hookSchema>;

export const hooksSchema = z
  .array(hookSchema)
  .refine((hooks) => new Set(hooks.map((h) => h.name)).size === hooks.length, 'hook names must be unique');

const natsSubjectPrefix = z
  .string()
  .regex(/^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$/, 'expected NATS subject tokens of A-Z a-z 0-9 _ -');

/** One Sandbox Service account of contract section 21; its name is in its endpoint, its ids and its events. */
export const accountSchema = z.strictObject({
  name: z
    .string()
    .regex(/^[a-z0-9][a-z0-9-]{0,62}$/, 'an account name is a-z or 0-9, then up to 62 of a-z, 0-9 and -')
    .refine((name) => name !== DEFAULT_ACCOUNT, `${DEFAULT_ACCOUNT} is the account of BOXRELAY_SECRETS and is reserved`),
  secrets: stringList.default([]),
  secretsFile: optionalText,
  upstreamBaseUrl: z.url({ protocol: /^https?$/ }).optional(),
  upstreamApiKey: optionalText,
  /** Unset: `<BOXRELAY_SOURCE>/<name>`. */
  cloudEventsSource: optionalText,
  /** Unset: BOXRELAY_NATS_SUBJECT_PREFIX. */
  natsSubjectPrefix: natsSubjectPrefix.optional(),
});

export type AccountConfig = z.infer<typeof accountSchema>;

/** Every account's name: `default`, then each configured one's (contract section 21). */
export function accountNamesOf(config: { accounts: AccountConfig[] }): string[] {
  return [DEFAULT_ACCOUNT, ...config.accounts.map((account) => account.name)];
}

/** Each configured account's CloudEvents `source`: its own, else `<BOXRELAY_SOURCE>/<name>` (contract section 21). */
export function accountSourcesOf(config: { source: string; accounts: AccountConfig[] }): Record<string, string> {
  return Object.fromEntries(config.accounts.map((account) => [account.name, account.cloudEventsSource ?? `${config.source}/${account.name}`]));
}

/**
 * The account list: names unique, each with a secret given here (a secret only the database holds
 * would leave the endpoint refusing everything until `boxrelay upstream register --account`).
 * Secrets shared between accounts are checked where the secrets files are read (`loadConfig`).
 */
export const accountsSchema = z.array(accountSchema).superRefine((accounts, ctx) => {
  const seen = new Set<string>();
  accounts.forEach((account, index) => {
    if (seen.has(account.name)) ctx.addIssue({ code: 'custom', path: [index, 'name'], message: `account ${account.name}: the name is given to two accounts` });
    seen.add(account.name);
    if (account.secrets.length === 0 && account.secretsFile === undefined) {
      ctx.addIssue({ code: 'custom', path: [index, 'secrets'], message: `account ${account.name}: no signing secret (give secrets or secretsFile)` });
    }
    if ((account.upstreamBaseUrl === undefined) !== (account.upstreamApiKey === undefined)) {
      ctx.addIssue({ code: 'custom', path: [index, 'upstreamApiKey'], message: `account ${account.name}: upstreamBaseUrl and upstreamApiKey go together` });
    }
  });
});

/** Every setting of contract section 1 (plus documented extensions), keyed as in a config file. */
export const configSchema = z.strictObject({
  port: port.default(8080),
  host: z.string().min(1).default('0.0.0.0'),
  internalPort: port.default(9091),
  internalHost: z.string().min(1).default('0.0.0.0'),
  secrets: stringList.default([]),
  secretsFile: optionalText,
  secretsReloadMs: positiveInt.default(1000),
  toleranceSeconds: positiveInt.default(300),
  maxBodyBytes: positiveInt.default(262_144),
  database: z.string().min(1).default('./data/boxrelay.db'),
  sqliteSynchronous: z.enum(['FULL', 'EXTRA', 'NORMAL']).default('FULL'),
  busyTimeoutMs: positiveInt.default(5000),
  /** PostgreSQL: the longest wait for a connection, a pool slot or one statement before the request answers 503. */
  databaseTimeoutMs: positiveInt.default(3000),
  databasePoolSize: positiveInt.default(10),
  /** PostgreSQL: queries waiting for a pool slot; one more is refused at once (503). */
  databaseMaxWaiting: positiveInt.default(100),
  retentionDays: positiveInt.default(30),
  /** SQLite: where the relay writes its scheduled backups (contract section 22); unset: none. */
  backupDir: optionalText,
  // A backup copies the whole file: more often than a minute would copy it without pause.
  backupInterval: duration.refine((ms) => ms >= 60_000, 'expected 1m or more').default(86_400_000),
  backupKeep: positiveInt.default(7),
  natsUrl: optionalText,
  natsSubjectPrefix: natsSubjectPrefix.default('sandbox'),
  natsMode: z.enum(['jetstream', 'core']).default('jetstream'),
  natsStream: z.string().regex(/^[A-Za-z0-9_-]+$/, 'expected a stream name of A-Z a-z 0-9 _ -').default('SANDBOX_EVENTS'),
  natsDuplicateWindow: duration.default(3_600_000),
  natsOrdering: ordering,
  /** Max age of a stream the relay creates; unset = the retention window, 0 = kept forever. */
  natsMaxAge: durationOrZero.optional(),
  natsCredsFile: optionalText,
  natsToken: optionalText,
  natsUser: optionalText,
  natsPassword: optionalText,
  natsTlsCaFile: optionalText,
  // Contract section 12: each bus is off unless its URL is set.
  amqpUrl: z.url({ protocol: /^amqps?$/ }).optional(),
  amqpExchange: z.string().min(1).max(255).default('sandbox'),
  amqpQueue: z.string().min(1).max(255).optional(),
  amqpOrdering: ordering,
  redisUrl: z.url({ protocol: /^rediss?$/ }).optional(),
  redisStream: z.string().min(1).default('sandbox:events'),
  /** About this many entries are kept (MAXLEN ~); 0 never trims. */
  redisMaxlen: z.coerce.number().int().min(0).default(1_000_000),
  redisDuplicateWindow: duration.refine((ms) => ms > 0, 'expected a duration above 0').default(3_600_000),
  redisOrdering: ordering,
  mqttUrl: z.url({ protocol: /^mqtts?$/ }).optional(),
  mqttTopicPrefix: z
    .string()
    .regex(/^[A-Za-z0-9_-]+(\/[A-Za-z0-9_-]+)*$/, 'expected MQTT topic levels of A-Z a-z 0-9 _ -')
    .default('sandbox'),
  mqttOrdering: ordering,
  // Contract section 18: Kafka is off unless its bootstrap brokers are set.
  kafkaBrokers: stringList
    .refine((brokers) => brokers.length > 0 && brokers.every((broker) => /^([^\s:,[\]]+|\[[0-9A-Fa-f:.]+\]):\d{1,5}$/.test(broker)), 'expected comma-separated host:port bootstrap brokers')
    .optional(),
  kafkaTopic: z
    .string()
    .regex(/^[A-Za-z0-9._-]{1,249}$/, 'expected a Kafka topic name of A-Z a-z 0-9 . _ - (at most 249)')
    .default('sandbox.events'),
  kafkaClientId: z.string().min(1).default('boxrelay'),
  kafkaSaslMechanism: z.enum(['plain', 'scram-sha-256', 'scram-sha-512']).optional(),
  kafkaSaslUsername: optionalText,
  kafkaSaslPassword: optionalText,
  kafkaTls: flag.default(false),
  kafkaTlsCaFile: optionalText,
  kafkaOrdering: ordering,
  // Contract section 20: SQS, SNS and the S3 archive, each off unless its own setting is set.
  /** Unset: AWS_REGION (read where the settings are loaded), else us-east-1. */
  awsRegion: z.string().regex(/^[a-z0-9-]+$/, 'expected an AWS region such as eu-west-1').optional(),
  awsEndpoint: z.url({ protocol: /^https?$/ }).optional(),
  sqsQueueUrl: z.url({ protocol: /^https?$/ }).optional(),
  sqsOrdering: ordering,
  snsTopicArn: z
    .string()
    .regex(/^arn:[a-z-]+:sns:[a-z0-9-]*:\d*:[A-Za-z0-9_-]{1,256}(\.fifo)?$/, 'expected an SNS topic ARN (arn:aws:sns:<region>:<account>:<topic>)')
    .optional(),
  snsOrdering: ordering,
  s3Archive: z
    .string()
    .regex(/^s3:\/\/[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](\/[^\s]*)?$/, 'expected s3://bucket/prefix')
    .optional(),
  s3ArchiveMaxEvents: positiveInt.max(100_000).default(1000),
  s3ArchiveMaxAge: duration.refine((ms) => ms > 0, 'expected a duration above 0').default(300_000),
  /** How often the dispatcher looks for work committed elsewhere (CLI, other replicas) and expired leases. */
  outboxPollMs: positiveInt.default(2000),
  /**
   * How long a replica holds the fan-out rows it works on; the rows of a replica that died are sent
   * by another once it runs out. Unset: per sink, its longest run of attempts plus 30 s.
   */
  outboxLeaseMs: positiveInt.optional(),
  /**
   * Pending work of a sink this replica does not serve is left to the replicas that do (a rolling
   * update); once none has announced it for this long, it is set aside as dead letters.
   */
  unservedSinkGrace: duration.default(600_000),
  /**
   * Where the dispatcher and its sinks run: `worker`, a worker thread (the receive thread only
   * receives; the worker's storage calls are served by the main thread's connection), or `inline`,
   * on the receiver's event loop (what tests that inject a clock or timing use).
   */
  fanoutThread: z.enum(['worker', 'inline']).default('worker'),
  /**
   * How much nicer than the process the fan-out worker thread runs (Linux, 0 to 19): on short cores a
   * backlog drain then takes what the receive and storage threads leave. Relative to the relay's own
   * threads only where the relay has a cgroup of its own (a container, a systemd service).
   */
  fanoutNiceness: z.coerce.number().int().min(0).max(19).default(10),
  /**
   * The fan-out worker thread's old-generation ceiling, in MB: without one V8 lets a busy worker's heap
   * grow with the garbage of a long drain, far past what it keeps alive.
   */
  fanoutHeapMb: z.coerce.number().int().min(128).max(16_384).default(256),
  /** Which delivery attempts are recorded for operators (contract section 16): every one, the failed ones, or none. */
  attempts: z.enum(['all', 'failed', 'off']).default('all'),
  hooksFile: optionalText,
  hooks: hooksSchema.default([]),
  /** Contract section 21: the accounts beside `default`, from a YAML/JSON file or inline in the config file. */
  accountsFile: optionalText,
  accounts: accountsSchema.default([]),
  source: z.string().min(1).default('sandbox'),
  // Guessable tokens are refused: the admin API may listen on 0.0.0.0.
  adminToken: z.string().min(32, 'must be at least 32 characters (make one with `openssl rand -hex 32`)').optional(),
  upstreamBaseUrl: z.url({ protocol: /^https?$/ }).optional(),
  upstreamApiKey: optionalText,
  secretsEncryptionKey: optionalText,
  /** Time between reconciliation runs (contract section 9); 0 turns the schedule off. */
  reconcileInterval: z.union([zeroDuration, z.literal('off').transform(() => 0), duration]).default(300_000),
  reconcileMaxRps: z.coerce.number().positive().max(1000).default(5),
  /** A run that needs more upstream pages (all listings together) or more time ends failed. */
  reconcileMaxPages: positiveInt.default(10_000),
  reconcileMaxDuration: duration.default(1_800_000),
  /** How often database secrets are re-read without traffic (a miss re-reads at once anyway). */
  databaseSecretsRefreshMs: positiveInt.default(30_000),
  /** On SIGTERM, how long /readyz answers 503 while the relay still serves, before it stops listening; 0 stops at once. */
  shutdownDelay: durationOrZero.default(5_000),
  shutdownTimeoutMs: positiveInt.default(25_000),
  logLevel: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
});

/**
 * The validated settings, and the proxy variables of contract section 14 (HTTPS_PROXY, HTTP_PROXY,
 * NO_PROXY in either case), which `loadConfig` reads from the environment; absent: none.
 */
export type Config = z.infer<typeof configSchema> & { proxyEnv?: ProxyEnv };
export type ConfigKey = keyof z.input<typeof configSchema>;

/** Settings whose env var is not `BOXRELAY_` + the key in SCREAMING_SNAKE_CASE. */
const ENV_EXCEPTIONS: Partial<Record<ConfigKey, string>> = { port: 'PORT', host: 'HOST', logLevel: 'LOG_LEVEL' };

export function envNameOf(key: ConfigKey): string {
  return ENV_EXCEPTIONS[key] ?? `BOXRELAY_${key.replace(/[A-Z]/g, (c) => `_${c}`).toUpperCase()}`;
}

export const configKeys = Object.keys(configSchema.shape) as ConfigKey[];
