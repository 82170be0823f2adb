import type { Clock } from '../clock.js';

export type CheckState = 'ok' | 'down';

export interface ReadinessReport {
  ok: boolean;
  checks: Record<string, CheckState>;
}

export interface ReadinessOptions {
  /** Proves storage can commit (a tiny durable write); throws or returns false when it cannot. */
  storageWritable(): Promise<boolean>;
  /** Other dependencies, reported but not deciding: the outbox holds the work while they are down. */
  dependencies?(): Record<string, CheckState>;
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
    return { ok: storage, checks: { storage: storage ? 'ok' : 'down', ...options.dependencies?.() } };
  };
}
