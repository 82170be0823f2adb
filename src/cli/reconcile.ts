import { Registry } from 'prom-client';
import { CLI_ACTOR, createAuditTrail } from '../audit-trail.js';
import { startAudited } from '../reconcile/start-audited.js';
import { createOperatorEvents } from '../dispatch/operator-events.js';
import { systemClock } from '../clock.js';
import type { Config } from '../config/schema.js';
import type { Logger } from '../log.js';
import { createMetrics } from '../metrics/metrics.js';
import { reconcileConfigured, reconcilerFromConfig } from '../reconcile/create.js';
import { filterErrorReporter } from '../sinks/filter-errors.js';
import { configuredSinks, sinkRouterOf } from '../sinks/route.js';
import { acceptEvent } from '../store/write/accept-event.js';
import { leaseClock } from '../store/engines/database-clock.js';
import { databaseOptionsOf } from '../store/engines/database.js';
import { lastSuccessAt } from '../store/state/reconcile-runs.js';
import { openStore } from '../store/store.js';
import type { Run } from '../store/state/reconcile-runs.js';
import type { Tracing } from '../tracing/tracing.js';

/**
 * `boxrelay reconcile [--dry-run]`: one run now, in this process, against the configured database
 * (the lease keeps it from overlapping a replica's run). The fan-out rows it stores are sent by the
 * running relay. Returns the run report; a run already going anywhere is ReconcileInProgressError.
 */
export async function reconcileOnce(config: Config, logger: Logger, tracing: Tracing, options: { dryRun: boolean }): Promise<Run | undefined> {
  if (!reconcileConfigured(config)) return undefined;
  const store = await openStore(databaseOptionsOf(config));
  try {
    const kysely = store.database.kysely;
    const metrics = createMetrics(new Registry(), {
      sinks: configuredSinks(config),
      sources: { reconcileLastSuccessAt: () => lastSuccessAt(kysely) },
    });
    const sinksFor = sinkRouterOf(config, filterErrorReporter({ clock: systemClock, logger }));
    const reconciler = reconcilerFromConfig({
      config,
      kysely,
      leaseNow: leaseClock(store.database),
      accept: acceptEvent({ writer: store.writer, sinksFor, metrics }),
      clock: systemClock,
      logger,
      metrics: metrics.reconcile as NonNullable<typeof metrics.reconcile>,
      operatorEvents: createOperatorEvents({ writer: store.writer, sinksFor, clock: systemClock, logger }),
      tracing,
    });
    const trail = createAuditTrail({ clock: systemClock, logger });
    const detail = options.dryRun ? { dryRun: true } : {};
    return await (await startAudited({ reconciler, kysely, trail }, { dryRun: options.dryRun, by: CLI_ACTOR, detail })).finished;
  } finally {
    await store.close();
  }
}
