import type { Clock } from '../clock.js';
import { storageFailureReason } from '../store/engines/storage-failures.js';

import type { CheckState, DependencyStatus } from '../dependency-status.js';

export interface ReadinessReport {
  ok: boolean;
  checks: Record<string, CheckState>;
  /** The reason of each failing check that has one, by dependency. */
  errors?: Record<string, string>;
  /** Set once SIGTERM arrived: the relay still serves, but a load balancer should stop sending. */
  shuttingDown?: true;
}

export interface ReadinessOptions {
  /** Proves storage can commit (a tiny durable write); throws or returns false when it cannot. */
  storageWritable(): Promise<boolean>;
  /** Other dependencies, reported but not deciding: the outbox holds the work while they are down. */
  dependencies?(): Record<string, DependencyStatus>;
  clock: Clock;
  /** Probes within this many ms reuse the last storage answer, so a public /readyz flood writes nothing. */
  cacheMs?: number;
  /** True from the start of a shutdown: not ready, whatever the checks say (contract section 6). */
  shuttingDown?(): boolean;
}

export function createReadiness(options: ReadinessOptions): () => Promise<ReadinessReport> {
  const cacheMs = options.cacheMs ?? 1000;
  let last: { at: number; storage: Promise<DependencyStatus> } | undefined;

  const storageCheck = (): Promise<DependencyStatus> => {
    const now = options.clock.now();
    if (!last || now - last.at >= cacheMs) {
      const storage = options.storageWritable().then(
        (ok): DependencyStatus => (ok ? { state: 'ok' } : { state: 'down', error: 'storage refused the write' }),
        (error: unknown): DependencyStatus => ({ state: 'down', error: storageFailureReason(error) }),
      );
      last = { at: now, storage };
    }
    return last.storage;
  };

  return async () => {
    const storage = await storageCheck();
    const shuttingDown = options.shuttingDown?.() ?? false;
    const report: ReadinessReport = { ok: storage.state === 'ok' && !shuttingDown, checks: { storage: storage.state } };
    if (shuttingDown) report.shuttingDown = true;
    if (storage.error !== undefined) report.errors = { storage: storage.error };
    for (const [name, { state, error }] of Object.entries(options.dependencies?.() ?? {})) {
      report.checks[name] = state;
      if (error !== undefined) (report.errors ??= {})[name] = error;
    }
    return report;
  };
}
