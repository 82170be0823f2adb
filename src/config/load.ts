import { readFileSync } from 'node:fs';
import { parse as parseYaml } from 'yaml';
import type { z } from 'zod';
import { proxyEnvOf, proxyEnvProblems } from '../egress/proxy-env.js';
import { readTlsFiles } from '../egress/tls-files.js';
import { describeError, errorCodeOf, RelayError } from '../errors.js';
import { untrusted } from '../log.js';
import { isPostgresUrl } from '../store/engines/database.js';
import { configExamples } from './examples.js';
import { secretsOfFile } from '../verify/secrets-file.js';
import { DEFAULT_ACCOUNT } from './default-account.js';
import { accountNamesOf, accountsSchema, configKeys, configSchema, envNameOf, hooksSchema, type Config, type ConfigKey } from './schema.js';

/** Thrown when configuration is invalid; `problems` holds one human-readable line each. */
export class ConfigError extends RelayError {
  readonly code = 'invalid_config';
  constructor(readonly problems: string[]) {
    super(`invalid configuration:\n${problems.map((p) => `  ${p}`).join('\n')}`);
  }
}

export interface ConfigSources {
  env: NodeJS.ProcessEnv;
  readFile?: (path: string) => string;
}

/**
 * Builds the configuration from `BOXRELAY_CONFIG` (YAML or JSON) overridden by env vars, validates
 * it once, and reads the hooks file. Every problem is reported, not only the first.
 */
export function loadConfig({ env, readFile = (p) => readFileSync(p, 'utf8') }: ConfigSources): Config {
  const problems: string[] = [];
  const raw: Record<string, unknown> = {};
  // Where each value came from, so a problem names the variable or the file's key.
  const fromEnv = new Set<string>();

  const configFile = env.BOXRELAY_CONFIG;
  if (configFile) {
    const fromFile = readStructuredFile(configFile, readFile, problems);
    if (fromFile !== undefined) {
      if (typeof fromFile !== 'object' || fromFile === null || Array.isArray(fromFile)) {
        problems.push(`BOXRELAY_CONFIG (${configFile}): expected a mapping of settings`);
      } else {
        Object.assign(raw, fromFile);
      }
    }
  }
  for (const key of configKeys) {
    const value = env[envNameOf(key)];
    if (value !== undefined && value !== '') {
      raw[key] = value;
      fromEnv.add(key);
    }
  }
  if (typeof raw.hooks === 'string') {
    problems.push('hooks: give the hook list in a file (BOXRELAY_HOOKS_FILE) or as a list in BOXRELAY_CONFIG');
    delete raw.hooks;
  }
  if (typeof raw.accounts === 'string') {
    problems.push('accounts: give the account list in a file (BOXRELAY_ACCOUNTS_FILE) or as a list in BOXRELAY_CONFIG');
    delete raw.accounts;
  }

  const parsed = configSchema.safeParse(raw);
  if (!parsed.success) problems.push(...describeIssues(parsed.error.issues, 'config', { file: configFile, fromEnv }));
  if (problems.length > 0 || !parsed.success) throw new ConfigError(problems);

  const config = parsed.data;
  if (config.hooksFile) config.hooks = readListFile('hooks', config.hooksFile, hooksSchema, raw.hooks !== undefined, readFile);
  if (config.accountsFile) config.accounts = readListFile('accounts', config.accountsFile, accountsSchema, raw.accounts !== undefined, readFile);
  const accountProblems = [...sharedSecretProblems(config, readFile), ...hookAccountProblems(config)];
  if (accountProblems.length > 0) throw new ConfigError(accountProblems);
  if ((config.natsUser === undefined) !== (config.natsPassword === undefined)) {
    throw new ConfigError(['BOXRELAY_NATS_USER and BOXRELAY_NATS_PASSWORD go together']);
  }
  // Scheduled backups copy a SQLite file (contract section 22): PostgreSQL has its own tools.
  if (config.backupDir !== undefined && isPostgresUrl(config.database)) {
    throw new ConfigError(['BOXRELAY_BACKUP_DIR: scheduled backups copy a SQLite database and BOXRELAY_DATABASE names PostgreSQL: unset it and back up with pg_dump']);
  }
  const kafkaProblems = kafkaSettingProblems(config, readFile);
  if (kafkaProblems.length > 0) throw new ConfigError(kafkaProblems);
  // Read now so a missing or broken file stops the start (exit 2), not every delivery later.
  const tlsProblems = config.hooks.flatMap((hook) => (hook.tls ? readTlsFiles(hook.name, hook.tls, readFile).problems : []));
  const proxyEnv = proxyEnvOf(env);
  const egressProblems = [...tlsProblems, ...proxyEnvProblems(proxyEnv)];
  if (egressProblems.length > 0) throw new ConfigError(egressProblems);
  // The AWS SDK's own variable is the region's fallback (contract section 20), read here with the rest of the env.
  return { ...config, awsRegion: config.awsRegion ?? (env.AWS_REGION || undefined), proxyEnv };
}

/**
 * One secret given to two accounts would let either account's deliveries verify at the other's
 * endpoint (contract section 21). Secrets files are read for it now, as serve reads them at start; a
 * problem names the accounts and never the secret.
 */
function sharedSecretProblems(config: Config, readFile: (path: string) => string): string[] {
  if (config.accounts.length === 0) return [];
  const problems: string[] = [];
  // Section 1's file is checked by serve and `config check`; its problems are not counted twice.
  const fileSecrets = (path: string | undefined, where: string) => (path === undefined ? [] : secretsOfFile(path, where, readFile, where === 'BOXRELAY_SECRETS_FILE' ? [] : problems).map((secret) => secret.value));
  const owners = new Map<string, string>();
  const owned: [string, string[]][] = [
    [DEFAULT_ACCOUNT, [...config.secrets, ...fileSecrets(config.secretsFile, 'BOXRELAY_SECRETS_FILE')]],
    ...config.accounts.map((account, index): [string, string[]] => [
      account.name,
      [...account.secrets, ...fileSecrets(account.secretsFile, `accounts.${index}.secretsFile`)],
    ]),
  ];
  const reported = new Set<string>();
  for (const [name, secrets] of owned) {
    for (const secret of new Set(secrets)) {
      const owner = owners.get(secret);
      const pair = `${owner} and ${name}`;
      if (owner === undefined) owners.set(secret, name);
      else if (!reported.has(pair)) {
        reported.add(pair);
        problems.push(`accounts ${pair}: one signing secret is given to both (each account needs its own; the secret is not shown)`);
      }
    }
  }
  return problems;
}

/** A hook's `accounts` name accounts this relay has: a typo would silently send it nothing. */
function hookAccountProblems(config: Config): string[] {
  const names = new Set(accountNamesOf(config));
  return config.hooks.flatMap((hook, index) =>
    (hook.accounts ?? [])
      .filter((name) => !names.has(name))
      .map((name) => `hooks.${index}.accounts: hook ${hook.name}: no account is named ${JSON.stringify(untrusted(name))} (accounts: ${[...names].join(', ')})`),
  );
}

/** Settings of contract section 18 that only make sense together; the CA file is read now, as the hooks' are. */
function kafkaSettingProblems(config: Config, readFile: (path: string) => string): string[] {
  const problems: string[] = [];
  const sasl = [config.kafkaSaslMechanism, config.kafkaSaslUsername, config.kafkaSaslPassword];
  if (sasl.some((value) => value !== undefined) && sasl.some((value) => value === undefined)) {
    problems.push('BOXRELAY_KAFKA_SASL_MECHANISM, BOXRELAY_KAFKA_SASL_USERNAME and BOXRELAY_KAFKA_SASL_PASSWORD go together');
  }
  if (config.kafkaTlsCaFile !== undefined) {
    if (!config.kafkaTls) problems.push('BOXRELAY_KAFKA_TLS_CA_FILE: needs BOXRELAY_KAFKA_TLS=true');
    else {
      try {
        if (!readFile(config.kafkaTlsCaFile).includes('-----BEGIN CERTIFICATE-----')) problems.push(`BOXRELAY_KAFKA_TLS_CA_FILE (${config.kafkaTlsCaFile}): not a PEM certificate`);
      } catch (error) {
        problems.push(`BOXRELAY_KAFKA_TLS_CA_FILE (${config.kafkaTlsCaFile}): cannot read (${errorCodeOf(error) ?? 'error'})`);
      }
    }
  }
  return problems;
}

/** The hooks or accounts file (`BOXRELAY_HOOKS_FILE`, `BOXRELAY_ACCOUNTS_FILE`), in place of the inline list, which may not be given too. */
function readListFile<T>(root: 'hooks' | 'accounts', path: string, schema: z.ZodType<T>, inline: boolean, readFile: (path: string) => string): T {
  if (inline) throw new ConfigError([`${envNameOf(`${root}File`)} and ${root} are both set: keep one`]);
  const problems: string[] = [];
  const list = schema.safeParse(readStructuredFile(path, readFile, problems) ?? []);
  if (!list.success) problems.push(...describeIssues(list.error.issues, root));
  if (problems.length > 0 || !list.success) throw new ConfigError(problems);
  return list.data;
}

function readStructuredFile(path: string, readFile: (path: string) => string, problems: string[]): unknown {
  let text: string;
  try {
    text = readFile(path);
  } catch (error) {
    problems.push(`${path}: cannot read (${errorCodeOf(error) ?? 'error'})`);
    return undefined;
  }
  try {
    return parseYaml(text) ?? undefined;
  } catch (error) {
    problems.push(`${path}: not valid YAML or JSON (${describeError(error).split('\n')[0]})`);
    return undefined;
  }
}

/** zod's wording where a reader would not recognise the problem (a number that is not one reads as NaN). */
function plainMessage(message: string): string {
  return message.replace(/^Invalid input: expected number, received NaN$/, 'expected a number');
}

/**
 * One line per problem: the variable (or `BOXRELAY_CONFIG (<file>) <key>` when the value came from
 * the config file), what is wrong, and a valid value to copy.
 */
function describeIssues(
  issues: z.core.$ZodIssue[],
  root: 'config' | 'hooks' | 'accounts',
  source: { file?: string | undefined; fromEnv: Set<string> } = { fromEnv: new Set() },
): string[] {
  const fileName = `BOXRELAY_CONFIG (${source.file})`;
  return issues.map((issue) => {
    const [head, ...rest] = issue.path;
    let where: string;
    let example = '';
    if (root !== 'config') where = `${root} file: ${[root, ...issue.path].map(String).join('.')}`;
    else if (head === undefined) where = source.file ? fileName : 'config';
    else if (head === 'hooks' || head === 'accounts') where = [head, ...rest].map(String).join('.');
    else if (configKeys.includes(head as ConfigKey)) {
      const key = head as ConfigKey;
      const inFile = source.file !== undefined && !source.fromEnv.has(key);
      where = [inFile ? `${fileName} ${key}` : envNameOf(key), ...rest].map(String).join('.');
      example = inFile ? `; e.g. ${key}: ${configExamples[key]}` : `; e.g. ${envNameOf(key)}=${configExamples[key]}`;
    } else where = String(head);
    const message =
      issue.code === 'unrecognized_keys' ? `unknown setting(s) ${issue.keys.join(', ')}` : plainMessage(issue.message);
    return `${where}: ${message}${example}`;
  });
}
