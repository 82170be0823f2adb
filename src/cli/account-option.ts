import { Option } from 'commander';
import { DEFAULT_ACCOUNT } from '../config/default-account.js';
import { accountNamesOf, type Config } from '../config/schema.js';
import { untrusted } from '../log.js';
import { isAccount } from '../upstream/account-upstream.js';
import { exitMisconfigured } from './misconfigured.js';

/** `--account <name>` of a command that acts for one account (contract section 21), `default` unless given. */
export function accountOption(description: string): Option {
  return new Option('--account <name>', description).default(DEFAULT_ACCOUNT);
}

/** `--account`: an account of the configuration (`default` or one in BOXRELAY_ACCOUNTS_FILE), else exit 2. */
export function accountOrExit(config: Config, name: string): string {
  if (isAccount(config, name)) return name;
  exitMisconfigured(`--account: no account is named ${JSON.stringify(untrusted(name))} (accounts: ${accountNamesOf(config).join(', ')})`);
}
