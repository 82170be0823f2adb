import type { Config, HookConfig } from '../config/schema.js';
import { OPERATOR_EVENT_PREFIX } from '../events/parse-event.js';
import { busNames } from './buses.js';

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
 * Which sinks get a fan-out row for an event type: every configured bus (operator events too), then
 * the hooks whose patterns match; cached per type, since types are few.
 */
export function createSinkRouter(options: { buses: string[]; hooks: HookConfig[] }): (type: string) => string[] {
  const matchers = options.hooks.map((hook) => ({
    name: hook.name,
    patterns: hook.events.map(globMatcher),
    // `*` alone does not sign a hook up for operator events: they are asked for by name.
    operatorPatterns: hook.events.filter((glob) => glob.startsWith(OPERATOR_EVENT_PREFIX)).map(globMatcher),
  }));
  const cache = new Map<string, string[]>();
  return (type) => {
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
}

/** The configured sinks' names: each bus whose URL is set, then each hook. */
export function configuredSinks(config: Config): string[] {
  return [...busNames(config), ...config.hooks.map((h) => h.name)];
}

/** The router of a configuration. */
export function sinkRouterOf(config: Config): (type: string) => string[] {
  return createSinkRouter({ buses: busNames(config), hooks: config.hooks });
}
