import type { HookConfig } from '../config/schema.js';
import { OPERATOR_EVENT_PREFIX } from '../events/cloudevent.js';

export const NATS_SINK = 'nats';

/** Event globs: `*` matches any run of characters, dots included; everything else is literal. */
export function globToRegExp(glob: string): RegExp {
  const escaped = glob.split('*').map((part) => part.replace(/[.+?^${}()|[\]\\]/g, '\\$&'));
  return new RegExp(`^${escaped.join('.*')}$`);
}

/** Which sinks get a fan-out row for an event type; cached per type, since types are few. */
export function createSinkRouter(options: { natsEnabled: boolean; hooks: HookConfig[] }): (type: string) => string[] {
  const matchers = options.hooks.map((hook) => ({
    name: hook.name,
    patterns: hook.events.map(globToRegExp),
    // `*` alone does not sign a hook up for operator events: they are asked for by name.
    operatorPatterns: hook.events.filter((glob) => glob.startsWith(OPERATOR_EVENT_PREFIX)).map(globToRegExp),
  }));
  const cache = new Map<string, string[]>();
  return (type) => {
    let sinks = cache.get(type);
    if (!sinks) {
      sinks = [
        ...(options.natsEnabled ? [NATS_SINK] : []),
        ...matchers
          .filter((m) => (type.startsWith(OPERATOR_EVENT_PREFIX) ? m.operatorPatterns : m.patterns).some((p) => p.test(type)))
          .map((m) => m.name),
      ];
      if (cache.size < 1000) cache.set(type, sinks);
    }
    return sinks;
  };
}

/** The configured sinks' names: `nats` when NATS is on, then each hook. */
export function configuredSinks(config: { natsUrl?: string | undefined; hooks: Pick<HookConfig, 'name'>[] }): string[] {
  return [...(config.natsUrl !== undefined ? [NATS_SINK] : []), ...config.hooks.map((h) => h.name)];
}
