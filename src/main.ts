import { Registry } from 'prom-client';
import { createAuditTrail } from './audit-trail.js';
import { systemClock, type Clock } from './clock.js';
import { accountNamesOf, accountSourcesOf, type Config } from './config/schema.js';
import { createDeliveryTally } from './dispatch/delivery-tally.js';
import { createAttemptRecorder } from './dispatch/attempt-recorder.js';
import { createFanoutThread, type FanoutThreadDeps } from './dispatch/fanout-thread.js';
import { createInlineFanout, createSinks, type Fanout } from './dispatch/fanout.js';
import { createOperations } from './dispatch/operations.js';
import { createOperatorEvents } from './dispatch/operator-events.js';
import { createPauses } from './dispatch/pauses.js';
import { createSinkDegradation, DEGRADATION_CHECK_MS, type SinkDegradation } from './dispatch/sink-degradation.js';
import type { DispatchTuning } from './dispatch/tuning.js';
import { accountsRoutes, type AccountsRoutesDeps } from './http/admin/accounts.js';
import { attemptRoutes } from './http/admin/attempts.js';
import { adminAccountsOf } from './http/admin/account-query.js';
import { auditRoutes } from './http/admin/audit.js';
import { sinkHealthRoutes } from './http/admin/sink-health.js';
import { RelayError } from './errors.js';
import { boxRoutes } from './http/admin/boxes.js';
import { deadLetterRoutes } from './http/admin/dead-letters.js';
import { eventRoutes } from './http/admin/events.js';
import { eventDeliveryRoutes } from './http/admin/event-deliveries.js';
import { hookTransformRoutes } from './http/admin/hook-transforms.js';
import { reconcileRoutes } from './http/admin/reconcile.js';
import { replayRoutes } from './http/admin/replay.js';
import { sinkRoutes } from './http/admin/sinks.js';
import { logRoutes } from './http/admin/log.js';
import { statsRoutes } from './http/admin/stats.js';
import { versionRoutes } from './http/admin/version.js';
import { createAdminRouter } from './http/admin/router.js';
import { createConsoleRouter } from './http/console/console-app.js';
import { createInternalApp } from './http/internal-app.js';
import { listen, type Listening } from './http/listen.js';
import { createPublicApp } from './http/public-app.js';
import type { AccountEndpoint } from './http/receive-webhook.js';
import { DEFAULT_ACCOUNT } from './config/default-account.js';
import type { DependencyStatus } from './dependency-status.js';
import { createReadiness } from './http/readiness.js';
import type { Logger } from './log.js';
import { boxStateCounts, createMetrics } from './metrics/metrics.js';
import type { BusTuning } from './sinks/bus.js';
import { reconcileConfigured, reconcilersFromConfig, type ReconcilerFromConfig } from './reconcile/create.js';
import { scheduleReconcile } from './reconcile/schedule.js';
import { scheduleRepeating, type Schedule } from './schedule.js';
import { filterErrorReporter, transformErrorReporter } from './sinks/filter-errors.js';
import { transformSourceOf } from './sinks/transform.js';
import { configuredSinks, sinkRouterOf } from './sinks/route.js';
import { acceptEvent } from './store/write/accept-event.js';
import { countBoxesByState } from './store/state/boxes.js';
import { createSinkStates } from './store/state/sink-state.js';
import { createDegradedMarks } from './store/state/degraded-marks.js';
import { createFanoutStore } from './store/fanout-store.js';
import { recordPastRouting } from './store/exceptions/past-routing.js';
import { unnumberedFor } from './store/log/sequencer.js';
import { createAttemptLog } from './store/attempts/record-attempts.js';
import { pruneExpired } from './store/retention/prune.js';
import { leaseClock } from './store/engines/database-clock.js';
import { newestMigration } from './store/engines/migrate.js';
import { databaseBytes } from './store/engines/database-bytes.js';
import { storageSpace } from './store/engines/storage-space.js';
import { packageVersion } from './package-version.js';
import { lastSuccessAt } from './store/state/reconcile-runs.js';
import { schedulePrune, type PruneSchedule, type Timers } from './store/retention/prune-schedule.js';
import { scheduleBackups, type Backups } from './store/copy/backup-schedule.js';
import { createSecretsStore } from './store/state/secrets-store.js';
import { databaseOptionsOf, isPostgresUrl, isSqliteFile, splitPool, type DatabaseOptions } from './store/engines/database.js';
import { addSinkMinutes } from './store/state/stats.js';
import { openStore, type Store } from './store/store.js';
import { createStorageFailureLog } from './store/engines/storage-failures.js';
import { accountUpstreams, isAccount } from './upstream/account-upstream.js';
import { createSecretCipher } from './upstream/secret-cipher.js';
import { tracingOff, type Tracing } from './tracing/tracing.js';
import { SecretRing } from './verify/secrets.js';
import { SecretsFile } from './verify/secrets-file.js';
import type { AuditTrail } from './audit-trail.js';
import type { AttemptRecorder } from './dispatch/attempt-recorder.js';
import type { DeliveryTally } from './dispatch/delivery-tally.js';
import type { DispatchMetrics } from './dispatch/dispatcher.js';
import type { Operations } from './dispatch/operations.js';
import type { OperatorEvents } from './dispatch/operator-events.js';
import type { Pauses } from './dispatch/pauses.js';
import type { AdminRoutes } from './http/admin/router.js';
import type { Metrics } from './metrics/metrics.js';
import type { Reconciler } from './reconcile/reconciler.js';
import type { SinkRouter } from './sinks/route.js';
import type { AttemptLog } from './store/attempts/record-attempts.js';
import type { FanoutStore } from './store/fanout-store.js';
import type { SinkStates } from './store/state/sink-state.js';

export class NoSecretError extends RelayError {
  readonly code = 'no_secret';
  constructor() {
    super(
      'no signing secret: set BOXRELAY_SECRETS (e.g. BOXRELAY_SECRETS=whsec_current) or BOXRELAY_SECRETS_FILE ' +
        '(e.g. BOXRELAY_SECRETS_FILE=/etc/boxrelay/signing/secrets), or run `boxrelay upstream register`',
    );
  }
}

/** Functions cannot cross to a worker thread: what tests inject needs the fan-out inline. */
export class InlineFanoutRequiredError extends RelayError {
  readonly code = 'inline_fanout_required';
  constructor() {
    super('a clock, dispatch tuning or bus options given to createRelay need fanoutThread: inline');
  }
}

export interface RelayDeps {
  config: Config;
  logger: Logger;
  clock?: Clock;
  registry?: Registry;
  /** Timers of the daily retention run (tests fire them by hand). */
  timers?: Timers;
  /** Fan-out timing (tests shorten it); the poll interval comes from the config. Inline fan-out only, like `clock` and `buses`. */
  dispatch?: Partial<DispatchTuning>;
  /** Every bus's ack timeout and reconnect delays. */
  buses?: BusTuning;
  /** OpenTelemetry (contract section 11); off unless given (`serve` builds it from the OTEL_* variables). */
  tracing?: Tracing;
  /** Reconciliation timing (tests fire the schedule by hand and shorten upstream retries). */
  /** `runTimers`: a run's lease renewal and deadline (`timers` is the schedule's). */
  reconcile?: { timers?: Timers; firstDelayMs?: number; upstream?: ReconcilerFromConfig['upstream']; wait?: ReconcilerFromConfig['wait']; leaseMs?: number; runTimers?: Timers };
  /** Timers of the scheduled backups (BOXRELAY_BACKUP_DIR; tests fire them by hand). */
  backup?: { timers?: Timers };
  /** Timers of the check for failing sinks (`boxrelay.sink.degraded`; tests fire them by hand). */
  degradation?: { timers?: Timers };
  /** A part the relay cannot serve without has ended (the storage thread): `serve` stops and exits 1, to be restarted. */
  onFatal?: (error: Error) => void;
}

export type Relay = Awaited<ReturnType<typeof createRelay>>;

/**
 * Wires every part from the validated config. Nothing listens or sends until `start()`, so tests
 * can drive `publicApp` and `internalApp` with supertest. Each part is made by a function of its
 * own below; the fan-out is made last, so the parts made before it reach it through `fanoutOf`.
 */
export async function createRelay(deps: RelayDeps) {
  const { config, logger, clock = systemClock, registry = new Registry(), tracing = tracingOff } = deps;
  if (config.fanoutThread === 'worker' && (clock !== systemClock || deps.dispatch || deps.buses)) throw new InlineFanoutRequiredError();
  // Read before the database is opened: a wrong key must not look like missing secrets.
  const secretsFile = config.secretsFile ? new SecretsFile(config.secretsFile, { logger: logger.child({ part: 'secrets' }) }) : undefined;
  secretsFile?.load();
  const accountFiles = loadAccountSecretsFiles(config, logger);
  const cipher = createSecretCipher(config.secretsEncryptionKey);

  let fanout: Fanout | undefined;
  const fanoutOf = (): Fanout => fanout!;
  const store = await openRelayStore({ config, logger, clock, onFatal: deps.onFatal, wake: () => fanout?.wake('log') });
  const { secrets, accounts } = await openSecretRings({ config, store, secretsFile, accountFiles, cipher, clock, logger });
  const defaultAccount = { name: DEFAULT_ACCOUNT, secrets };
  // With accounts configured, `/webhooks` is served only while the default account has a secret (contract section 21).
  const defaultServed = () => accounts.endpoints.size === 0 || secrets.accepted().length > 0;
  /** The accounts whose endpoints are served now: what the admin API lists and the secrets gauges read. */
  const servedAccounts = (): AccountEndpoint[] => [...(defaultServed() ? [defaultAccount] : []), ...accounts.endpoints.values()];

  const sinkNames = configuredSinks(config);
  // Filter errors count in a metric made below, once the router's filtered sinks are known.
  let metrics: Metrics | undefined;
  const sinksFor = sinkRouterOf(
    config,
    filterErrorReporter({ clock, logger: logger.child({ part: 'filters' }), count: (sink) => metrics!.filterErrors.inc({ sink }) }),
  );
  const fanoutStore = createFanoutStore(store.database);
  const sinkStates = createSinkStates(store.database);
  const operatorEvents = createOperatorEvents({ writer: store.writer, sinksFor, clock, logger });
  const pauses = createPauses({
    sinkStates,
    makeDue: fanoutStore.exceptions.makeDue,
    operatorEvents,
    clock,
    logger,
    changed: (sink) => fanoutOf().sinkStateChanged(sink),
  });

  // From SIGTERM on, /readyz answers 503 on both ports while the relay still serves (contract section 6).
  let shuttingDown = false;
  const readiness = createReadiness({
    shuttingDown: () => shuttingDown,
    storageWritable: () => store.checkWritable(clock.now()),
    dependencies: (): Record<string, DependencyStatus> => fanoutOf().dependencies(),
    clock,
  });
  const logHeldBackSeconds = async () => (await unnumberedFor(store.database, clock.now())) / 1000;
  const backups = config.backupDir
    ? scheduleBackups({
        database: config.database,
        dir: config.backupDir,
        intervalMs: config.backupInterval,
        keep: config.backupKeep,
        clock,
        logger: logger.child({ part: 'backup' }),
        timers: deps.backup?.timers,
      })
    : undefined;
  // The worker thread keeps its own recorder; its batches are written within 100 ms.
  const attemptLog = createAttemptLog(store.database);
  const inlineAttempts = config.fanoutThread === 'inline' ? createAttemptRecorder({ log: attemptLog, mode: config.attempts, logger }) : undefined;
  const degradation = createSinkDegradation({
    kysely: store.database.kysely,
    marks: createDegradedMarks(store.database.kysely),
    sinks: sinkNames,
    operatorEvents,
    clock,
    flush: async () => inlineAttempts?.flush(),
    logger,
  });
  metrics = createRelayMetrics({ config, registry, store, fanoutStore, sinkStates, servedAccounts, readiness, sinkNames, sinksFor, fanoutOf, logHeldBackSeconds, backups, degradation });

  // Delivered and failed attempts per sink and minute, for GET /admin/stats, from the dispatcher's own counts.
  const tally = createDeliveryTally({ store: (counts) => addSinkMinutes(store.database, counts), clock, logger });
  fanout = createRelayFanout({ deps, store, fanoutStore, sinkStates, pauses, operatorEvents, attemptLog, inlineAttempts, metrics, dispatchMetrics: tally.metrics(metrics), sinkNames });
  const trail = createAuditTrail({ clock, logger });
  const operations = createOperations({ exceptions: fanoutStore.exceptions, sinks: sinkNames, sinksFor, clock, trail, wake: fanout.wake });

  const accept = acceptEvent({ writer: store.writer, sinksFor, metrics });
  const publicApp = createPublicApp({
    toleranceSeconds: config.toleranceSeconds,
    maxBodyBytes: config.maxBodyBytes,
    clock,
    accountOf: (name) => (name === DEFAULT_ACCOUNT ? (defaultServed() ? defaultAccount : undefined) : accounts.endpoints.get(name)),
    accept,
    metrics,
    tracing,
    readiness,
    logger,
  });
  // A second entrance to the store, beside the receiver: events found upstream take `accept` too.
  // One reconciler per account with API credentials (contract section 21).
  const reconcilers: ReadonlyMap<string, Reconciler> = !metrics.reconcile
    ? new Map()
    : reconcilersFromConfig({
      config,
      kysely: store.database.kysely,
      leaseNow: leaseClock(store.database),
      accept,
      clock,
      logger,
      metrics: metrics.reconcile,
      operatorEvents,
      tracing,
      upstream: deps.reconcile?.upstream,
      wait: deps.reconcile?.wait,
      leaseMs: deps.reconcile?.leaseMs,
      timers: deps.reconcile?.runTimers,
    });
  const reconciler = reconcilers.get(DEFAULT_ACCOUNT);
  const listedAccounts = () => servedAccounts().map(({ name, secrets: ring }) => ({ name, secrets: ring.accepted().length }));
  const admin = config.adminToken
    ? createAdminRouter(
        config.adminToken,
        adminRoutes({ config, clock, store, fanoutStore, fanout, sinkStates, pauses, operations, reconcilers, trail, tally, inlineAttempts, sinkNames, logHeldBackSeconds, listedAccounts }),
      )
    : undefined;
  const internalApp = createInternalApp({ registry, readiness, admin, console: admin && createConsoleRouter(), logger });

  const lifecycle = relayLifecycle({
    deps,
    store,
    fanout,
    secrets,
    secretsFile,
    accountSecretsFiles: accounts.files,
    accountEndpoints: [...accounts.endpoints.values()],
    sinksFor,
    reconcilers,
    tally,
    backups,
    degradation,
    publicApp,
    internalApp,
    sinkNames,
    shuttingDown: (begin) => (shuttingDown ||= begin),
  });
  return {
    config,
    store,
    fanoutStore,
    /** The fan-out (inline or in its worker thread). */
    fanout,
    secrets,
    secretsFile,
    /** The configured accounts' endpoints, by name, and their secrets files. */
    accounts: accounts.endpoints,
    accountSecretsFiles: accounts.files,
    registry,
    /** The `default` account's reconciler, and every account's by name (contract section 21). */
    reconciler,
    reconcilers,
    publicApp,
    internalApp,
    ...lifecycle,
  };
}

/** The store, its commits waking the fan-out; a storage thread that ends stops the relay. */
function openRelayStore({
  config,
  logger,
  clock,
  onFatal = () => {},
  wake,
}: {
  config: Config;
  logger: Logger;
  clock: Clock;
  onFatal?: ((error: Error) => void) | undefined;
  wake: () => void;
}): Promise<Store> {
  return openStore({
    ...receiverDatabaseOptions(config),
    // With the fan-out in its thread, no SQLite work of the hot path is left on this one.
    storageThread: config.fanoutThread === 'worker',
    onCommit: wake,
    onFailure: createStorageFailureLog({ logger: logger.child({ part: 'storage' }), clock }),
    onStorageLost: (error) => {
      logger.fatal({ err: error }, 'the storage thread ended; every delivery would be refused, so the relay stops');
      onFatal(error);
    },
  });
}

/** On PostgreSQL the fan-out worker has a pool of its own, out of the configured size. */
function receiverDatabaseOptions(config: Config): DatabaseOptions {
  const options = databaseOptionsOf(config);
  return config.fanoutThread === 'worker' && isPostgresUrl(options.url) ? splitPool(options).receiver : options;
}

/** The worker's own connections: to a SQLite file with a link to its storage thread, or a pool of PostgreSQL's. */
function fanoutDatabase(config: Config, store: Store): Pick<FanoutThreadDeps, 'ownDatabase'> {
  if (store.link) return { ownDatabase: { options: databaseOptionsOf(config), link: store.link } };
  return store.database.dialect === 'postgres' ? { ownDatabase: { options: splitPool(databaseOptionsOf(config)).fanout } } : {};
}

/**
 * Each configured account's secrets file (contract section 21), read now: a missing or invalid one
 * stops the start, as section 1's does.
 */
function loadAccountSecretsFiles(config: Config, logger: Logger): Map<string, SecretsFile> {
  const files = new Map<string, SecretsFile>();
  for (const account of config.accounts) {
    if (account.secretsFile === undefined) continue;
    const file = new SecretsFile(account.secretsFile, { logger: logger.child({ part: 'secrets', account: account.name }) });
    file.load();
    files.set(account.name, file);
  }
  return files;
}

/**
 * Every account's accepted signing secrets (environment or its list, file, and the database's rows of
 * that account, which `boxrelay upstream … --account` writes): `default`'s, and each configured
 * account's endpoint (contract section 21). No secret for `default` closes the store and refuses to
 * start, unless other accounts are configured (then `/webhooks` answers 404 until one is).
 */
async function openSecretRings({
  config,
  store,
  secretsFile,
  accountFiles,
  cipher,
  clock,
  logger,
}: {
  config: Config;
  store: Store;
  secretsFile: SecretsFile | undefined;
  accountFiles: Map<string, SecretsFile>;
  cipher: ReturnType<typeof createSecretCipher>;
  clock: Clock;
  logger: Logger;
}): Promise<{ secrets: SecretRing; accounts: { endpoints: Map<string, AccountEndpoint>; files: SecretsFile[] } }> {
  const ring = (account: string, env: string[], file: SecretsFile | undefined) => {
    const secretsLogger = logger.child({ part: 'secrets', ...(account === DEFAULT_ACCOUNT ? {} : { account }) });
    return new SecretRing({
      env,
      file,
      database: createSecretsStore({ db: store.database.kysely, account, cipher, clock, logger: secretsLogger }),
      clock,
      onDatabaseChange: (list) => secretsLogger.info({ count: list.length }, 'database secrets changed'),
    });
  };
  const secrets = ring(DEFAULT_ACCOUNT, config.secrets, secretsFile);
  const endpoints = new Map(config.accounts.map(({ name, secrets: list }) => [name, { name, secrets: ring(name, list, accountFiles.get(name)) }]));
  try {
    // Read first: `upstream register` may have left the only secret in the database.
    await Promise.all([secrets, ...[...endpoints.values()].map((endpoint) => endpoint.secrets)].map((r) => r.refreshDatabase()));
    if (secrets.accepted().length === 0 && config.accounts.length === 0) throw new NoSecretError();
  } catch (error) {
    await store.close();
    throw error;
  }
  return { secrets, accounts: { endpoints, files: [...accountFiles.values()] } };
}

/** The registry's metrics, with the sources each scrape reads. */
function createRelayMetrics({
  config,
  registry,
  store,
  fanoutStore,
  sinkStates,
  servedAccounts,
  readiness,
  sinkNames,
  sinksFor,
  fanoutOf,
  logHeldBackSeconds,
  backups,
  degradation,
}: {
  config: Config;
  registry: Registry;
  store: Store;
  fanoutStore: FanoutStore;
  sinkStates: SinkStates;
  servedAccounts: () => AccountEndpoint[];
  readiness: ReturnType<typeof createReadiness>;
  sinkNames: string[];
  sinksFor: SinkRouter;
  fanoutOf: () => Fanout;
  logHeldBackSeconds: () => Promise<number>;
  backups: Backups | undefined;
  degradation: SinkDegradation;
}): Metrics {
  const kysely = store.database.kysely;
  return createMetrics(registry, {
    sinks: sinkNames,
    accounts: accountNamesOf(config),
    filtered: [...sinksFor.filtered],
    transformed: config.hooks.filter((hook) => transformSourceOf(hook) !== undefined).map((hook) => hook.name),
    sources: {
      databaseBytes: () => databaseBytes(store.database, config.database),
      ...(isSqliteFile(config.database) ? { storageSpace: () => storageSpace(config.database) } : {}),
      secrets: () => Object.fromEntries(servedAccounts().map(({ name, secrets: ring }) => [name, ring.accepted()])),
      ready: async () => (await readiness()).ok,
      boxesByState: async () => boxStateCounts(await countBoxesByState(kysely)),
      // Work of a sink no longer configured is set aside, not pending.
      pendingBySink: async () => {
        const counts = await fanoutStore.exceptions.countBySink('pending');
        return Object.fromEntries(sinkNames.map((sink) => [sink, counts[sink] ?? 0]));
      },
      deadLettersBySink: () => fanoutStore.exceptions.countBySink('deadLetters'),
      sinkUp: () => Object.fromEntries(fanoutOf().sinks.map((sink) => [sink.name, sink.up()])),
      pausedSinks: async () => [...(await sinkStates.readAll()).values()].filter((s) => s.paused_at !== null).map((s) => s.sink),
      sinkFailureRatios: degradation.ratios,
      ...(reconcileConfigured(config) ? { reconcileLastSuccessAt: () => lastSuccessAt(kysely, accountUpstreams(config).map((a) => a.account)) } : {}),
      logUnnumberedSeconds: logHeldBackSeconds,
      ...(backups ? { backupLastSuccessAt: backups.lastSuccessAt } : {}),
    },
  });
}

/** The fan-out: in its worker thread (the default), or on this event loop (tests that inject a clock). */
function createRelayFanout({
  deps,
  store,
  fanoutStore,
  sinkStates,
  pauses,
  operatorEvents,
  attemptLog,
  inlineAttempts,
  metrics,
  dispatchMetrics,
  sinkNames,
}: {
  deps: RelayDeps;
  store: Store;
  fanoutStore: FanoutStore;
  sinkStates: SinkStates;
  pauses: Pauses;
  operatorEvents: OperatorEvents;
  attemptLog: AttemptLog;
  inlineAttempts: AttemptRecorder | undefined;
  metrics: Metrics;
  dispatchMetrics: DispatchMetrics;
  sinkNames: string[];
}): Fanout {
  const { config, logger, clock = systemClock, tracing = tracingOff } = deps;
  const exclusive = store.database.dialect === 'sqlite';
  if (config.fanoutThread === 'worker') {
    return createFanoutThread({
      config,
      exclusive,
      tracing: tracing.enabled,
      parts: { log: fanoutStore.log, exceptions: fanoutStore.exceptions, archive: fanoutStore.archive, sinkStates, pauses, operatorEvents, attempts: attemptLog },
      ...fanoutDatabase(config, store),
      metrics: dispatchMetrics,
      countTransformErrors: (sink, count) => metrics.transformErrors.inc({ sink }, count),
      sinkNames,
      logger,
    });
  }
  return createInlineFanout({
    ...createSinks({
      config,
      clock,
      logger,
      buses: deps.buses,
      archive: fanoutStore.archive,
      onTransformError: transformErrorReporter({ clock, logger: logger.child({ part: 'transforms' }), count: (sink) => metrics.transformErrors.inc({ sink }) }),
    }),
    store: fanoutStore,
    clock,
    logger,
    metrics: dispatchMetrics,
    source: config.source,
    accountSources: accountSourcesOf(config),
    exclusive,
    sinkStates,
    pauses,
    operatorEvents,
    tracing,
    attempts: inlineAttempts,
    tuning: { pollMs: config.outboxPollMs, leaseMs: config.outboxLeaseMs, unservedGraceMs: config.unservedSinkGrace, ...deps.dispatch },
  });
}

/** The admin API's routes (contract sections 8, 15 and 16), behind the admin token. */
function adminRoutes({
  config,
  clock,
  store,
  fanoutStore,
  fanout,
  sinkStates,
  pauses,
  operations,
  reconcilers,
  trail,
  tally,
  inlineAttempts,
  sinkNames,
  logHeldBackSeconds,
  listedAccounts,
}: {
  config: Config;
  clock: Clock;
  store: Store;
  fanoutStore: FanoutStore;
  fanout: Fanout;
  sinkStates: SinkStates;
  pauses: Pauses;
  operations: Operations;
  reconcilers: ReadonlyMap<string, Reconciler>;
  trail: AuditTrail;
  tally: DeliveryTally;
  inlineAttempts: AttemptRecorder | undefined;
  sinkNames: string[];
  logHeldBackSeconds: () => Promise<number>;
  listedAccounts: AccountsRoutesDeps['accounts'];
}): AdminRoutes[] {
  const kysely = store.database.kysely;
  const accounts = adminAccountsOf(config, store.database);
  return [
    eventRoutes(kysely, accounts),
    boxRoutes(store.database, trail, accounts),
    deadLetterRoutes(operations),
    replayRoutes(operations),
    reconcileRoutes(reconcilers, { kysely, trail, isAccount: (name) => isAccount(config, name) }),
    accountsRoutes({
      database: store.database,
      bytewise: accounts.bytewise,
      accounts: listedAccounts,
      reconcile: (name) => reconcilers.get(name)?.status() ?? null,
    }),
    eventDeliveryRoutes({ kysely, exceptions: fanoutStore.exceptions, accounts }),
    hookTransformRoutes({ kysely, hooks: config.hooks, accounts }),
    sinkRoutes({ sinks: fanout.sinks, sinkStates, pauses, countBySink: fanoutStore.exceptions.countBySink, trail }),
    logRoutes({ heldBackSeconds: logHeldBackSeconds }),
    auditRoutes(kysely, accounts),
    attemptRoutes({ kysely, operations, accounts }),
    sinkHealthRoutes({ kysely, clock, sinks: sinkNames, flush: async () => inlineAttempts?.flush() }),
    statsRoutes({ kysely, clock, flush: tally.flush }),
    versionRoutes({ version: packageVersion(), node: process.version, schema: () => newestMigration(store.database) }),
  ];
}

/** What the relay's start and stop act on. */
interface LifecycleParts {
  deps: RelayDeps;
  store: Store;
  fanout: Fanout;
  secrets: SecretRing;
  secretsFile: SecretsFile | undefined;
  accountSecretsFiles: SecretsFile[];
  /** The configured accounts' endpoints, whose database secrets are read again as `default`'s are. */
  accountEndpoints: AccountEndpoint[];
  sinksFor: SinkRouter;
  reconcilers: ReadonlyMap<string, Reconciler>;
  tally: DeliveryTally;
  backups: Backups | undefined;
  degradation: SinkDegradation;
  publicApp: Parameters<typeof listen>[0];
  internalApp: Parameters<typeof listen>[0];
  sinkNames: string[];
  /** Marks the shutdown begun (`true`); answers whether it has. */
  shuttingDown: (begin: boolean) => boolean;
}

/** Start, drain and stop: what listens, the schedules, and the order they end in. */
function relayLifecycle(parts: LifecycleParts) {
  const { deps, store, fanout, secrets, secretsFile, accountSecretsFiles, accountEndpoints, sinksFor, reconcilers, tally, backups, degradation, publicApp, internalApp, sinkNames, shuttingDown } = parts;
  const { config, logger, clock = systemClock, tracing = tracingOff, timers, reconcile: reconcileOptions } = deps;
  const secretsLogger = logger.child({ part: 'secrets' });
  let listening: Listening[] = [];
  let pruning: PruneSchedule | undefined;
  let reconciling: Schedule | undefined;
  let degradationChecks: Schedule | undefined;
  let pastRouting: { stop: AbortController; done: Promise<void> } | undefined;
  return {
    async start() {
      await store.started();
      await fanout.start();
      const publicServer = await listen(publicApp, config.port, config.host);
      const internalServer = await listen(internalApp, config.internalPort, config.internalHost);
      listening = [publicServer, internalServer];
      // A SIGTERM during start: the servers serve their delay already draining.
      if (shuttingDown(false)) for (const l of listening) l.drain();
      // An event an older release stored lists every sink it went to once this is done: after listening, since its
      // cost grows with what that release stored (nothing is sent; a start cut short goes on at the next).
      const stop = new AbortController();
      pastRouting = {
        stop,
        done: recordPastRouting(store.database, sinksFor, { signal: stop.signal }).then(
          (rows) => {
            if (rows > 0) logger.info({ rows }, 'delivered rows written for events stored before statuses were kept (routed by this configuration)');
          },
          (error: unknown) => logger.error({ err: error }, 'could not write the delivered rows of events stored before statuses were kept; the next start goes on'),
        ),
      };
      secretsFile?.start(config.secretsReloadMs);
      for (const file of accountSecretsFiles) file.start(config.secretsReloadMs);
      secrets.startDatabaseRefresh(config.databaseSecretsRefreshMs, (error) =>
        secretsLogger.error({ err: error }, 'cannot read database secrets; keeping the last set'),
      );
      for (const { name, secrets: ring } of accountEndpoints) {
        ring.startDatabaseRefresh(config.databaseSecretsRefreshMs, (error) =>
          secretsLogger.error({ err: error, account: name }, 'cannot read database secrets; keeping the last set'),
        );
      }
      const retentionLogger = logger.child({ part: 'retention' });
      pruning = schedulePrune({
        prune: (signal) => pruneExpired(store.database, { now: clock.now(), retentionDays: config.retentionDays, signal, logger: retentionLogger }),
        logger: retentionLogger,
        timers,
      });
      if (config.reconcileInterval > 0) {
        reconciling = scheduleReconcile(reconcilers, {
          intervalMs: config.reconcileInterval,
          logger,
          timers: reconcileOptions?.timers,
          firstDelayMs: reconcileOptions?.firstDelayMs,
        });
      }
      backups?.start();
      // On the main thread, beside the receiver: two reads per check whatever the traffic, none per delivery (createSinkDegradation).
      degradationChecks = scheduleRepeating(() => degradation.check(), {
        timers: deps.degradation?.timers,
        firstDelayMs: DEGRADATION_CHECK_MS,
        intervalMs: DEGRADATION_CHECK_MS,
        onError: (error) => logger.error({ err: error }, 'could not check the sinks for failures; next check at the next interval'),
      });
      logger.info({ port: publicServer.port, internalPort: internalServer.port, sinks: sinkNames }, 'boxrelay listening');
      return { port: publicServer.port, internalPort: internalServer.port };
    },
    /**
     * The start of a shutdown (SIGTERM): `/readyz` answers 503 so load balancers stop sending, and
     * every answer closes its connection; everything else is still served until `stop()`.
     */
    drain() {
      shuttingDown(true);
      for (const l of listening) l.drain();
    },
    /**
     * Graceful: stop accepting and finish in-flight requests; then the dispatcher finishes or
     * releases its deliveries, the buses drain, and the database closes (after the worker thread, whose
     * storage calls it serves, has ended).
     */
    async stop() {
      const started = Date.now();
      shuttingDown(true);
      secretsFile?.stop();
      for (const file of accountSecretsFiles) file.stop();
      pastRouting?.stop.abort();
      await Promise.all([
        ...listening.map((l) => l.close(config.shutdownTimeoutMs)),
        pastRouting?.done,
        pruning?.stop(),
        reconciling?.stop(),
        ...[...reconcilers.values()].map((reconciler) => reconciler.stop()),
        backups?.stop(),
        degradationChecks?.stop(),
      ]);
      pruning = undefined;
      reconciling = undefined;
      degradationChecks = undefined;
      await Promise.all([secrets, ...accountEndpoints.map((endpoint) => endpoint.secrets)].map((ring) => ring.stopDatabaseRefresh()));
      listening = [];
      // One shutdown budget for both: what the HTTP close used is not given to the sinks again.
      await fanout.stop(Math.max(1000, config.shutdownTimeoutMs - (Date.now() - started)));
      await tally.flush();
      await store.close();
      await tracing.shutdown();
      logger.info('boxrelay stopped');
    },
  };
}
