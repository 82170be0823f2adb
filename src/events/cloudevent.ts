import { DEFAULT_ACCOUNT } from '../config/default-account.js';

/** The normalized event of contract section 3 (CloudEvents 1.0, structured JSON). */
export interface CloudEvent {
  specversion: '1.0';
  id: string;
  source: string;
  type: string;
  subject?: string;
  time: string;
  datacontenttype: 'application/json';
  data: Record<string, unknown>;
  /** Extension attribute: how a reconciliation run found the event; absent on received webhooks. */
  boxrelayorigin?: string;
  /** Extension attribute: the account of the event (contract section 21), `default` included. */
  boxrelayaccount: string;
}

/** The account an event is of, with its CloudEvents `source`. */
export interface EventAccount {
  name: string;
  source: string;
}

/**
 * The account of an event by its name (none: `default`), with the `source` its configuration gives
 * (`BOXRELAY_SOURCE` for `default`); an account no longer configured keeps its name, with the default rule's source.
 */
export function eventAccount(name: string | undefined, source: string, accountSources: Readonly<Record<string, string>>): EventAccount {
  if (name === undefined || name === DEFAULT_ACCOUNT) return { name: DEFAULT_ACCOUNT, source };
  return { name, source: accountSources[name] ?? `${source}/${name}` };
}

interface StoredPayload {
  id: string;
  type: string;
  createdAt: string;
  /** Operator events name their subject (a sink or a box); upstream events take the box id. */
  subject?: string;
  data: Record<string, unknown> & { box?: { id?: unknown } };
}

/**
 * Builds the CloudEvent from the stored raw payload: `data` unchanged, `subject` the raw box id.
 * An operator event is one the relay wrote (its stored origin), whatever its type says. Every event
 * carries its account's name (absent: `default`, as for everything earlier releases stored), and
 * a received one the account's `source`.
 */
export function toCloudEvent(payload: string, source: string, origin: string | null = null, account?: EventAccount): CloudEvent {
  const event = JSON.parse(payload) as StoredPayload;
  const operator = origin === 'operator';
  const subject = operator ? event.subject : event.data.box?.id;
  return {
    specversion: '1.0',
    id: event.id,
    source: operator ? `${source}/boxrelay` : (account?.source ?? source),
    type: event.type,
    ...(typeof subject === 'string' && subject !== '' ? { subject } : {}),
    time: event.createdAt,
    datacontenttype: 'application/json',
    data: event.data,
    ...(origin === 'history' || origin === 'synthesized' ? { boxrelayorigin: origin } : {}),
    boxrelayaccount: account?.name ?? DEFAULT_ACCOUNT,
  };
}

/**
 * The id receivers deduplicate by (`Nats-Msg-Id`, `webhook-id`, FIFO deduplication ids; contract
 * section 21): the event id for the default account, `<name>:<event id>` for any other, so one
 * delivery id under two accounts is two messages to them.
 */
export function receiverId(event: Pick<CloudEvent, 'id' | 'boxrelayaccount'>): string {
  return event.boxrelayaccount === DEFAULT_ACCOUNT ? event.id : `${event.boxrelayaccount}:${event.id}`;
}
