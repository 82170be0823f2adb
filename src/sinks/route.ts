import { DEFAULT_ACCOUNT } from '../config/default-account.js';
import { accountSourcesOf, type Config, type HookConfig } from '../config/schema.js';
import { eventAccount, toCloudEvent, type CloudEvent } from '../events/cloudevent.js';
import { OPERATOR_EVENT_PREFIX } from '../events/parse-event.js';
import type { StoredEvent } from '../events/types.js';
import { busNames } from './buses.js';
import { celEventOf, type CelEvent } from './cel-budget.js';
import { compileFilter, type EventFilter } from './filter.js';

/**
 * Event globs: `*` matches any run of characters, dots included; everything else is literal and
 * case-sensitive. Matched without regular expressions (`.*` backtracks: quadratic or worse on long
 * signed types): the literal parts between stars are found left to right, each at its first place,
 * which leaves the most room to the rest; so no backtracking, and at most one scan per part.
 */
export function globMatcher(glob: string): (type: string) => boolean {
  const parts = glob.split('*');
  const first = parts[0] as string;
  if (parts.length === 1) return (type) => type === glob;
  const last = parts[parts.length - 1] as string;
  const middle = parts.slice(1, -1).filter((part) => part !== '');
  return (type) => {
    if (type.length < first.length + last.length || !type.startsWith(first) || !type.endsWith(last)) return false;
    const end = type.length - last.length;
    let at = first.length;
    for (const part of middle) {
      const found = type.indexOf(part, at);
      if (found < 0 || found + part.length > end) return false;
      at = found + part.length;
    }
    return true;
  };
}

/**
 * Which sinks get a fan-out row for an event: by its type (`events` patterns, cached per type, since
 * types are few), then, given the event, less the hooks whose `filter` is not true for it. Without
 * the event, by type alone; `filtered` names the hooks a type alone cannot decide.
 */
export type SinkRouter = ((type: string, event?: StoredEvent) => string[]) & { readonly filtered: ReadonlySet<string> };

export interface SinkRouterOptions {
  /** Every configured bus gets every event (operator events too). */
  buses: string[];
  hooks: Pick<HookConfig, 'name' | 'events' | 'filter' | 'accounts'>[];
  /** CloudEvents `source` of the events filters see. */
  source: string;
  /** The other accounts' `source`s (contract section 21). */
  accountSources?: Readonly<Record<string, string>>;
  /** A filter that failed on an event (counted as false). */
  onFilterError?: (sink: string, error: Error) => void;
}

export function createSinkRouter(options: SinkRouterOptions): SinkRouter {
  const matchers = options.hooks.map((hook) => ({
    name: hook.name,
    patterns: hook.events.map(globMatcher),
    // `*` alone does not sign a hook up for operator events: they are asked for by name.
    operatorPatterns: hook.events.filter((glob) => glob.startsWith(OPERATOR_EVENT_PREFIX)).map(globMatcher),
  }));
  const filters = new Map<string, EventFilter>();
  for (const hook of options.hooks) if (hook.filter !== undefined) filters.set(hook.name, compileFilter(hook.filter));
  // A hook that lists accounts gets only their events (contract section 21); the others get every account's.
  const accountsOf = new Map(options.hooks.flatMap((hook) => (hook.accounts === undefined ? [] : [[hook.name, new Set(hook.accounts)] as const])));
  const ofAccount = (sinks: string[], account: string) =>
    accountsOf.size === 0 ? sinks : sinks.filter((sink) => accountsOf.get(sink)?.has(account) ?? true);
  const cache = new Map<string, string[]>();
  const byType = (type: string): string[] => {
    let sinks = cache.get(type);
    if (!sinks) {
      sinks = [
        ...options.buses,
        ...matchers
          .filter((m) => (type.startsWith(OPERATOR_EVENT_PREFIX) ? m.operatorPatterns : m.patterns).some((matches) => matches(type)))
          .map((m) => m.name),
      ];
      if (cache.size < 1000) cache.set(type, sinks);
    }
    return sinks;
  };
  const passes = (sink: string, filter: EventFilter, event: () => { json: CloudEvent; cel: CelEvent }): boolean => {
    try {
      const { json, cel } = event();
      return filter.matches(json, cel);
    } catch (error) {
      options.onFilterError?.(sink, error as Error);
      return false;
    }
  };
  const route = (type: string, stored?: StoredEvent): string[] => {
    const account = stored?.account ?? DEFAULT_ACCOUNT;
    const sinks = ofAccount(byType(type), account);
    if (stored === undefined || !sinks.some((sink) => filters.has(sink))) return sinks;
    let event: { json: CloudEvent; cel: CelEvent } | undefined;
    // Made once for all the event's filters.
    const built = () => {
      if (event === undefined) {
        const json = toCloudEvent(stored.payload, options.source, stored.origin ?? null, eventAccount(account, options.source, options.accountSources ?? {}));
        event = { json, cel: celEventOf(json) };
      }
      return event;
    };
    return sinks.filter((sink) => {
      const filter = filters.get(sink);
      return filter === undefined || passes(sink, filter, built);
    });
  };
  return Object.assign(route, { filtered: new Set(filters.keys()) as ReadonlySet<string> });
}

/** The router of a configuration. */
export const sinkRouterOf = (config: Config, onFilterError?: SinkRouterOptions['onFilterError']): SinkRouter =>
  createSinkRouter({ buses: busNames(config), hooks: config.hooks, source: config.source, accountSources: accountSourcesOf(config), onFilterError });

/** The configured sinks' names: each bus whose URL is set, then each hook. */
export function configuredSinks(config: Config): string[] {
  return [...busNames(config), ...config.hooks.map((h) => h.name)];
}
