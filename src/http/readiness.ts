import type { Clock } from '../clock.js';

/** `error`: the dependency answers but refuses what the relay needs (e.g. a JetStream stream). */
export type CheckState = 'ok' | 'down' | 'error';

export interface DependencyStatus {
  state: CheckState;
  /** Why, for `error`; for `ok`, a refusal of some work that leaves the rest flowing. Safe to show (no secrets). */
  error?: string;
}

export interface ReadinessReport {
  ok: boolean;
  checks: Record<string, CheckState>;
  /** The reason of each check in `error`, by dependency. */
  errors?: Record<string, string>;
}

export interface ReadinessOptions {
  /** Proves storage can commit (a tiny durable write); throws or returns false when it cannot. */
  storageWritable(): Promise<boolean>;
  /** Other dependencies, reported but not deciding: the outbox holds the work while they are down. */
  dependencies?(): Record<string, DependencyStatus>;
  clock: Clock;
  /** Probes within this many ms reuse the last storage answer, so a public /readyz flood writes nothing. */
  cacheMs?: number;
}

export function createReadiness(options: ReadinessOptions): () => Promise<ReadinessReport> {
  const cacheMs = options.cacheMs ?? 1000;
  let last: { at: number; storage: Promise<boolean> } | undefined;

  const storageOk = (): Promise<boolean> => {
    const now = options.clock.now();
    if (!last || now - last.at >= cacheMs) {
      last = { at: now, storage: options.storageWritable().catch(() => false) };
    }
    return last.storage;
  };

  return async () => {
    const storage = await storageOk();
    const report: ReadinessReport = { ok: storage, checks: { storage: storage ? 'ok' : 'down' } };
    for (const [name, { state, error }] of Object.entries(options.dependencies?.() ?? {})) {
      report.checks[name] = state;
      if (error !== undefined) (report.errors ??= {})[name] = error;
    }
    return report;
  };
}
