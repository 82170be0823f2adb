import { Registry } from 'prom-client';
import { CLI_ACTOR, createAuditTrail } from '../audit-trail.js';
import { startAudited } from '../reconcile/start-audited.js';
import { createOperatorEvents } from '../dispatch/operator-events.js';
import { systemClock } from '../clock.js';
import type { Config } from '../config/schema.js';
import type { Logger } from '../log.js';
import { createMetrics } from '../metrics/metrics.js';
import { accountReconciler } from '../reconcile/create.js';
import { filterErrorReporter } from '../sinks/filter-errors.js';
import { configuredSinks, sinkRouterOf } from '../sinks/route.js';
import { acceptEvent } from '../store/write/accept-event.js';
import { leaseClock } from '../store/engines/database-clock.js';
import { databaseOptionsOf } from '../store/engines/database.js';
import { lastSuccessAt } from '../store/state/reconcile-runs.js';
import { openStore } from '../store/store.js';
import type { Run } from '../store/state/reconcile-runs.js';
import type { Tracing } from '../tracing/tracing.js';
import { DEFAULT_ACCOUNT } from '../config/default-account.js';
import { accountUpstream } from '../upstream/account-upstream.js';

/**
 * `boxrelay reconcile [--dry-run] [--account <name>]`: one run of the account (`default` unless
 * named) now, in this process, against the configured database (its lease keeps it from overlapping
 * a replica's run of the same account). The fan-out rows it stores are sent by the running relay.
 * Returns the run report, or undefined when the account has no API credentials; a run of the account
 * already going anywhere is ReconcileInProgressError.
 */
export async function reconcileOnce(config: Config, logger: Logger, tracing: Tracing, options: { dryRun: boolean; account: string }): Promise<Run | undefined> {
  const credentials = accountUpstream(config, options.account);
  if (credentials === undefined) return undefined;
  const store = await openStore(databaseOptionsOf(config));
  try {
    const kysely = store.database.kysely;
    const metrics = createMetrics(new Registry(), {
      sinks: configuredSinks(config),
      sources: { reconcileLastSuccessAt: () => lastSuccessAt(kysely, [options.account]) },
    });
    const sinksFor = sinkRouterOf(config, filterErrorReporter({ clock: systemClock, logger }));
    const reconciler = accountReconciler(credentials, {
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
    // What was asked, as `POST /admin/reconcile` records its body.
    const detail = { ...(options.dryRun ? { dryRun: true } : {}), ...(options.account === DEFAULT_ACCOUNT ? {} : { account: options.account }) };
    return await (await startAudited({ reconciler, kysely, trail }, { dryRun: options.dryRun, by: CLI_ACTOR, detail })).finished;
  } finally {
    await store.close();
  }
}
