import { sql, type RawBuilder, type SqlBool } from 'kysely';
import type { ParsedEvent } from '../events/parse-event.js';
import { DEFAULT_ACCOUNT } from '../config/default-account.js';

/**
 * The store's keys of an account's event (contract section 21): its id and box id as
 * `<name>:<id>` for every account but `default`, whose keys are those earlier releases stored. So
 * dedup, box state and per-box order are per account while each stays keyed by one column, and the
 * stored id is the one receivers deduplicate by. Upstream ids (`evt_<hex>`, `bx_<id>`) hold no `:`,
 * and account names no `:`, so no two accounts' keys meet.
 */
export function accountKeyed(event: ParsedEvent, account: string): ParsedEvent {
  if (account === DEFAULT_ACCOUNT) return event;
  return { ...event, id: accountKey(account, event.id), boxId: event.boxId === null ? null : accountKey(account, event.boxId) };
}

/** The stored key of one of an account's upstream ids (an event's or a box's). */
export function accountKey(account: string, id: string): string {
  return account === DEFAULT_ACCOUNT ? id : `${account}:${id}`;
}

/**
 * The stored key of an account's event or box named by its upstream id; undefined for an id no
 * event or box of that account can have (an id with a `:` under `default` is another account's
 * key, which a request for `default` must not reach).
 */
export function keyOfAccountId(account: string, id: string): string | undefined {
  const key = accountKey(account, id);
  return splitAccountKey(key).account === account ? key : undefined;
}

/** A stored key as what the admin API shows: the account and the upstream's id. */
export function splitAccountKey(key: string): { account: string; id: string } {
  const account = namedAccountOf(key);
  return account === undefined ? { account: DEFAULT_ACCOUNT, id: key } : { account, id: key.slice(account.length + 1) };
}

/** The account of a stored key other than `default`'s: what `accountKeyed` put before its `:`. */
export function namedAccountOf(key: string): string | undefined {
  const colon = key.indexOf(':');
  return colon === -1 ? undefined : key.slice(0, colon);
}

/** What a named account's key looks like (SQL LIKE): what a run for `default` must leave alone. */
export const NAMED_ACCOUNT_KEY = '%:%';

/**
 * The rows of one account, by their key in `column`. `default`'s keys hold no `:`, which no index
 * finds: a scan. A named account's keys start with `<name>:`; where text sorts bytewise
 * (`sortsTextBytewise`) they are the range from `<name>:` to `<name>;` (`;` follows `:`), which the
 * key's index counts without reading other accounts' rows; elsewhere only the pattern finds them.
 */
export function ofAccount(column: string, account: string, bytewise: boolean): RawBuilder<SqlBool> {
  const ref = sql.ref(column);
  if (account === DEFAULT_ACCOUNT) return sql<SqlBool>`${ref} not like ${NAMED_ACCOUNT_KEY}`;
  if (bytewise) return sql<SqlBool>`(${ref} >= ${`${account}:`} and ${ref} < ${`${account};`})`;
  // Names are a-z, 0-9 and -: nothing in them is a LIKE wildcard.
  return sql<SqlBool>`${ref} like ${`${account}:%`}`;
}
