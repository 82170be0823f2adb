import type { Registry } from 'prom-client';
import type { HookConfig } from '../../src/config/schema.js';
import type { DispatchTuning } from '../../src/dispatch/tuning.js';
import type { OutboxTable } from '../../src/store/schema.js';
import type { TestRelay } from './relay.js';

/** Fan-out timing for tests: millisecond in-process waits, scheduled retries due at once. */
export const fastTuning: Partial<DispatchTuning> = {
  pollMs: 200,
  quickMinDelayMs: 5,
  quickFactor: 2,
  retryDelayMs: () => 0,
};

export function hook(name: string, url: string, extra: Partial<HookConfig> = {}): Partial<HookConfig> {
  return { name, url, ...extra };
}

/** The outbox rows of one sink, in id order. */
export function outboxRows(t: TestRelay, sink: string): Promise<OutboxTable[]> {
  return t.relay.store.database.kysely
    .selectFrom('outbox')
    .selectAll()
    .where('sink', '=', sink)
    .orderBy('id')
    .execute() as Promise<never>;
}

/** A metric's value for the given labels (0 when absent). */
export async function metricValue(registry: Registry, name: string, labels: Record<string, string>): Promise<number> {
  const metric = registry.getSingleMetric(name);
  if (!metric) throw new Error(`no metric ${name}`);
  const { values } = await metric.get();
  const found = values.find((v) => Object.entries(labels).every(([k, value]) => v.labels[k] === value));
  return found?.value ?? 0;
}
