import { Registry } from 'prom-client';
import { systemClock, type Clock } from './clock.js';
import type { Config } from './config/schema.js';
import { boxRoutes } from './http/admin/boxes.js';
import { eventRoutes } from './http/admin/events.js';
import { createAdminRouter } from './http/admin/router.js';
import { createInternalApp } from './http/internal-app.js';
import { listen, type Listening } from './http/listen.js';
import { createPublicApp } from './http/public-app.js';
import { createReadiness } from './http/readiness.js';
import type { Logger } from './log.js';
import { boxStateCounts, createMetrics } from './metrics/metrics.js';
import { NATS_SINK, createSinkRouter } from './sinks/route.js';
import { countBoxesByState } from './store/boxes.js';
import { pruneExpired } from './store/prune.js';
import { schedulePrune, type PruneSchedule, type Timers } from './store/prune-schedule.js';
import { createSecretsStore } from './store/secrets-store.js';
import { openStore, type Store } from './store/store.js';
import { createSecretCipher } from './upstream/secret-cipher.js';
import { SecretRing } from './verify/secrets.js';
import { SecretsFile } from './verify/secrets-file.js';

export class NoSecretError extends Error {
  readonly code = 'no_secret';
  constructor() {
    super('no signing secret: set BOXRELAY_SECRETS or BOXRELAY_SECRETS_FILE, or run `boxrelay upstream register`');
  }
}

export interface RelayDeps {
  config: Config;
  logger: Logger;
  clock?: Clock;
  registry?: Registry;
  /** Timers of the daily retention run (tests fire them by hand). */
  timers?: Timers;
}

export type Relay = Awaited<ReturnType<typeof createRelay>>;

/**
 * Wires every part from the validated config. Nothing listens until `start()`, so tests can drive
 * `publicApp` and `internalApp` with supertest.
 */
export async function createRelay({ config, logger, clock = systemClock, registry = new Registry(), timers }: RelayDeps) {
  const secretsFile = config.secretsFile
    ? new SecretsFile(config.secretsFile, { logger: logger.child({ part: 'secrets' }) })
    : undefined;
  secretsFile?.load();

  // Refused before the database is opened: a wrong key must not look like missing secrets.
  const cipher = createSecretCipher(config.secretsEncryptionKey);
  const store: Store = await openStore({
    url: config.database,
    sqliteSynchronous: config.sqliteSynchronous,
    busyTimeoutMs: config.busyTimeoutMs,
  });
  const secretsLogger = logger.child({ part: 'secrets' });
  const secrets = new SecretRing({
    env: config.secrets,
    file: secretsFile,
    database: createSecretsStore({ db: store.database.kysely, cipher, clock, logger: secretsLogger }),
    clock,
    onDatabaseChange: (list) => secretsLogger.info({ count: list.length }, 'database secrets changed'),
  });
  try {
    // Read first: `upstream register` may have left the only secret in the database.
    await secrets.refreshDatabase();
    if (secrets.accepted().length === 0) throw new NoSecretError();
  } catch (error) {
    await store.close();
    throw error;
  }

  const kysely = store.database.kysely;
  const natsEnabled = config.natsUrl !== undefined;
  const sinks = [...(natsEnabled ? [NATS_SINK] : []), ...config.hooks.map((h) => h.name)];
  const readiness = createReadiness({ storageWritable: () => store.checkWritable(clock.now()), clock });
  const metrics = createMetrics(registry, {
    sinks,
    sources: {
      secrets: () => secrets.accepted(),
      ready: async () => (await readiness()).ok,
      boxesByState: async () => boxStateCounts(await countBoxesByState(kysely)),
    },
  });

  const publicApp = createPublicApp({
    toleranceSeconds: config.toleranceSeconds,
    maxBodyBytes: config.maxBodyBytes,
    clock,
    secrets,
    writer: store.writer,
    sinksFor: createSinkRouter({ natsEnabled, hooks: config.hooks }),
    metrics,
    readiness,
    logger,
  });
  const admin = config.adminToken
    ? createAdminRouter(config.adminToken, [eventRoutes(kysely, config.source), boxRoutes(kysely)])
    : undefined;
  const internalApp = createInternalApp({ registry, readiness, admin, logger });

  let listening: Listening[] = [];
  let pruning: PruneSchedule | undefined;
  return {
    config,
    store,
    secrets,
    secretsFile,
    registry,
    publicApp,
    internalApp,
    async start() {
      const publicServer = await listen(publicApp, config.port, config.host);
      const internalServer = await listen(internalApp, config.internalPort, config.internalHost);
      listening = [publicServer, internalServer];
      secretsFile?.start(config.secretsReloadMs);
      secrets.startDatabaseRefresh(config.databaseSecretsRefreshMs, (error) =>
        secretsLogger.error({ err: error }, 'cannot read database secrets; keeping the last set'),
      );
      pruning = schedulePrune({
        prune: (signal) => pruneExpired(kysely, { now: clock.now(), retentionDays: config.retentionDays, signal }),
        logger: logger.child({ part: 'retention' }),
        timers,
      });
      logger.info({ port: publicServer.port, internalPort: internalServer.port, sinks }, 'boxrelay listening');
      return { port: publicServer.port, internalPort: internalServer.port };
    },
    /** Graceful: stop accepting, finish in-flight requests, then close the database. */
    async stop() {
      secretsFile?.stop();
      await Promise.all([...listening.map((l) => l.close(config.shutdownTimeoutMs)), pruning?.stop()]);
      pruning = undefined;
      await secrets.stopDatabaseRefresh();
      listening = [];
      await store.close();
      logger.info('boxrelay stopped');
    },
  };
}
