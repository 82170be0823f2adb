import { readFileSync } from 'node:fs';
import { Command } from 'commander';
import { stringify as stringifyYaml } from 'yaml';
import { systemClock, type Clock } from '../clock.js';
import { ConfigError, loadConfig } from '../config/load.js';
import { redactConfig } from '../config/redact.js';
import type { Config } from '../config/schema.js';
import { createTracing, TracingConfigError } from '../tracing/tracing.js';
import { createSecretCipher, SecretCipherError } from '../upstream/secret-cipher.js';
import { secretsOfFile } from '../verify/secrets-file.js';
import { exitInvalidConfig } from './misconfigured.js';

export interface ConfigCheckSources {
  env: NodeJS.ProcessEnv;
  readFile?: (path: string) => string;
  clock?: Clock;
}

export type ConfigCheck =
  | { ok: true; config: Config; /** What serve may still refuse, which only the database can tell. */ notes: string[] }
  | { ok: false; problems: string[] };

/**
 * The configuration as `serve` reads it before it opens the database: the settings (environment,
 * BOXRELAY_CONFIG, the hooks file and every file they name), the OTEL_* variables, the secrets file
 * and the encryption key. Every problem is kept, not only the first; nothing is opened or contacted.
 */
export function checkConfig({ env, readFile = (path) => readFileSync(path, 'utf8'), clock = systemClock }: ConfigCheckSources): ConfigCheck {
  const problems: string[] = [];
  let config: Config | undefined;
  try {
    config = loadConfig({ env, readFile });
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    problems.push(...error.problems);
  }
  try {
    // Built only to be checked: an exporter sends nothing until a span ends, so there is nothing to flush.
    createTracing(env)
      .shutdown()
      .catch(() => {});
  } catch (error) {
    if (!(error instanceof TracingConfigError)) throw error;
    problems.push(error.message);
  }
  if (config === undefined) return { ok: false, problems };
  const fileSecrets = config.secretsFile === undefined ? [] : secretsOfFile(config.secretsFile, 'BOXRELAY_SECRETS_FILE', readFile, problems);
  try {
    createSecretCipher(config.secretsEncryptionKey);
  } catch (error) {
    if (!(error instanceof SecretCipherError)) throw error;
    problems.push(error.message);
  }
  if (problems.length > 0) return { ok: false, problems };
  const now = clock.now();
  const unexpired = [...config.secrets, ...fileSecrets.filter(({ expiresAt }) => expiresAt === undefined || now <= expiresAt)];
  // With accounts configured, `default` may have none: its endpoint then answers 404 (contract section 21).
  const notes =
    unexpired.length > 0
      ? []
      : config.accounts.length > 0
        ? ['no signing secret for the default account in BOXRELAY_SECRETS or the secrets file: POST /webhooks answers 404 unless the database holds one']
        : ['no signing secret in BOXRELAY_SECRETS or the secrets file: serve starts only if the database holds one (boxrelay upstream register)'];
  return { ok: true, config, notes };
}

/** `boxrelay config check` (contract section 22): exit 0 with the settings, secrets as `***`, or exit 2 with one line per problem. */
export function configCommand(env: NodeJS.ProcessEnv): Command {
  const command = new Command('config').description('the configuration, as serve reads it');
  command
    .command('check')
    .description('read the configuration as serve does and print the effective settings, secrets as ***; opens no database, contacts nothing')
    .action(() => {
      const checked = checkConfig({ env });
      if (!checked.ok) exitInvalidConfig(checked.problems);
      for (const note of checked.notes) process.stderr.write(`boxrelay: ${note}\n`);
      process.stdout.write(stringifyYaml(redactConfig(checked.config)));
    });
  return command;
}
