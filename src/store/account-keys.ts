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
  return { ...event, id: `${account}:${event.id}`, boxId: event.boxId === null ? null : `${account}:${event.boxId}` };
}

/** The account of a stored key other than `default`'s: what `accountKeyed` put before its `:`. */
export function namedAccountOf(key: string): string | undefined {
  const colon = key.indexOf(':');
  return colon === -1 ? undefined : key.slice(0, colon);
}

/** What a named account's key looks like (SQL LIKE): what a run for `default` must leave alone. */
export const NAMED_ACCOUNT_KEY = '%:%';
