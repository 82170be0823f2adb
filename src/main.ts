import { Registry } from 'prom-client';
import { systemClock, type Clock } from './clock.js';
import type { Config } from './config/schema.js';
import { createAdminRouter } from './http/admin/router.js';
import { createInternalApp } from './http/internal-app.js';
import { listen, type Listening } from './http/listen.js';
import { createPublicApp } from './http/public-app.js';
import { createReadiness } from './http/readiness.js';
import type { Logger } from './log.js';
import { createMetrics } from './metrics/metrics.js';
import { NATS_SINK, createSinkRouter } from './sinks/route.js';
import { openStore, type Store } from './store/store.js';
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
}

export type Relay = Awaited<ReturnType<typeof createRelay>>;

/**
 * Wires every part from the validated config. Nothing listens until `start()`, so tests can drive
 * `publicApp` and `internalApp` with supertest.
 */
export async function createRelay({ config, logger, clock = systemClock, registry = new Registry() }: RelayDeps) {
  const secretsFile = config.secretsFile
    ? new SecretsFile(config.secretsFile, { logger: logger.child({ part: 'secrets' }) })
    : undefined;
  secretsFile?.load();

  const store: Store = await openStore({
    url: config.database,
    sqliteSynchronous: config.sqliteSynchronous,
    busyTimeoutMs: config.busyTimeoutMs,
  });
  const secrets = new SecretRing({ env: config.secrets, file: secretsFile, clock });
  if (secrets.accepted().length === 0) {
    await store.close();
    throw new NoSecretError();
  }

  const natsEnabled = config.natsUrl !== undefined;
  const sinks = [...(natsEnabled ? [NATS_SINK] : []), ...config.hooks.map((h) => h.name)];
  const readiness = createReadiness({ storageWritable: () => store.checkWritable(clock.now()), clock });
  const metrics = createMetrics(registry, {
    sinks,
    sources: { secrets: () => secrets.accepted(), ready: async () => (await readiness()).ok },
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
  const admin = config.adminToken ? createAdminRouter(config.adminToken, []) : undefined;
  const internalApp = createInternalApp({ registry, readiness, admin, logger });

  let listening: Listening[] = [];
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
      logger.info({ port: publicServer.port, internalPort: internalServer.port, sinks }, 'boxrelay listening');
      return { port: publicServer.port, internalPort: internalServer.port };
    },
    /** Graceful: stop accepting, finish in-flight requests, then close the database. */
    async stop() {
      secretsFile?.stop();
      await Promise.all(listening.map((l) => l.close(config.shutdownTimeoutMs)));
      listening = [];
      await store.close();
      logger.info('boxrelay stopped');
    },
  };
}
