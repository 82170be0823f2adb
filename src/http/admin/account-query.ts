import type { Request } from 'express';
import { DEFAULT_ACCOUNT } from '../../config/default-account.js';
import { accountNamesOf, accountSourcesOf, type AccountConfig } from '../../config/schema.js';
import { InvalidRequestError } from '../../errors.js';
import { eventAccount } from '../../events/cloudevent.js';
import { untrusted } from '../../log.js';
import { keyOfAccountId, splitAccountKey } from '../../store/account-keys.js';
import type { Database } from '../../store/engines/database.js';
import { textOrderOnce } from '../../store/engines/text-order.js';
import { z } from 'zod';
import { queryParam } from './operation.js';
import { queryText } from './pagination.js';

/** The relay's accounts as the admin routes address them (contract section 21). */
export interface AdminAccounts {
  /** `default` and each configured account. */
  names: readonly string[];
  /** `BOXRELAY_SOURCE`, the default account's CloudEvents `source`. */
  source: string;
  /** Each configured account's `source`. */
  sources: Readonly<Record<string, string>>;
  /** Whether the database sorts text bytewise, so that a named account's keys are one range (`ofAccount`). */
  bytewise(): Promise<boolean>;
}

export function adminAccountsOf(config: { source: string; accounts: AccountConfig[] }, database: Database): AdminAccounts {
  return {
    names: accountNamesOf(config),
    source: config.source,
    sources: accountSourcesOf(config),
    bytewise: textOrderOnce(database),
  };
}

/** `account=` on a list: only that account's rows. */
export const ACCOUNT_FILTER = { account: queryParam("Only those of this account: `default` or a configured account's name (contract section 21).") };

/** `account=` beside an event or box id in the path: the account the id is of. */
export const ACCOUNT_OF_ID = { account: queryParam("The account the id is of: `default` (the default) or a configured account's name (contract section 21).") };

/**
 * The `account=` given, if any. A name that is no account is refused (400 `invalid_request`, as a
 * `sink` that is not configured is), never answered as an empty list: a misspelt name must not read
 * as "this account has nothing".
 */
export function accountParam(req: Request, accounts: AdminAccounts): string | undefined {
  const name = queryText(req, 'account');
  if (name !== undefined && !accounts.names.includes(name)) throw new InvalidRequestError(`account ${JSON.stringify(untrusted(name))} is not configured`);
  return name;
}

/** The stored key of the event or box a path names, of the account `account=` names (default `default`), as `keyOfAccountId`. */
export function keyOfId(req: Request, accounts: AdminAccounts, id: string): string | undefined {
  return keyOfAccountId(accountParam(req, accounts) ?? DEFAULT_ACCOUNT, id);
}

/** A stored key's account, with the CloudEvents `source` of its events. */
export function accountOfKey(key: string, accounts: AdminAccounts) {
  return eventAccount(splitAccountKey(key).account, accounts.source, accounts.sources);
}

/** A row naming an event by its stored key, as the admin API shows it: the upstream's id and the account. */
export function eventIdShown<T extends { eventId: string }>(row: T): T & { account: string } {
  const { account, id } = splitAccountKey(row.eventId);
  return { ...row, eventId: id, account };
}

/** `account` of a row naming an event, described once. */
export const EVENT_ACCOUNT = z.string().describe("The event's account (contract section 21): give it with `eventId` to `GET /admin/events/:id?account=`.");
