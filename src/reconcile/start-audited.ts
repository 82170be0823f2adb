import type { Kysely } from 'kysely';
import type { AuditTrail } from '../audit-trail.js';
import { recordAudit } from '../store/state/audit.js';
import type { Schema } from '../store/schema.js';
import type { Reconciler, StartedRun } from './reconciler.js';

/**
 * An operator's reconcile (admin API or CLI): a run is no single write, so it is recorded once it
 * has started; a refused start (one already runs) records nothing. `detail` is what was asked.
 */
export function startAudited(
  { reconciler, kysely, trail }: { reconciler: Reconciler; kysely: Kysely<Schema>; trail: AuditTrail },
  { dryRun, by, detail }: { dryRun: boolean; by: string; detail: Record<string, unknown> },
): Promise<StartedRun> {
  return trail.record({ action: 'reconcile', target: null, by, detail }, async (note) => {
    const started = await reconciler.start({ dryRun });
    await recordAudit(kysely, note);
    return started;
  });
}
