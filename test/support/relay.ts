import { Registry } from 'prom-client';
import request from 'supertest';
import { configSchema, type Config } from '../../src/config/schema.js';
import { createRelay, type Relay, type RelayDeps } from '../../src/main.js';
import { checkingAdminAnswers } from './admin-openapi.js';
import { ManualClock } from './clock.js';
import { migratedSqliteFile } from './databases.js';
import { captureLogs, type CapturedLogs } from './log-capture.js';
import { SECRET, delivery, sendRaw, type DeliveryOptions } from './sign.js';
import { HandTimers } from './timers.js';

export interface TestRelay {
  relay: Relay;
  config: Config;
  clock: ManualClock;
  registry: Registry;
  logs: CapturedLogs;
  /** Posts a signed delivery to the real public app; timestamp defaults to the clock's now. */
  post(options?: Partial<DeliveryOptions>): Promise<request.Response & { deliveryId: string }>;
  /** Posts a delivery to an account's endpoint (`/webhooks/<account>`, `/webhooks` for `default`), signed with `secret`. */
  postTo(account: string, secret: string, options?: Partial<DeliveryOptions>): Promise<request.Response & { deliveryId: string }>;
  close(): Promise<void>;
}

export interface TestRelayOptions extends Pick<RelayDeps, 'dispatch' | 'buses' | 'reconcile' | 'tracing' | 'degradation'> {
  clock?: ManualClock;
}

/** A real relay (real database file, real apps) with a manual clock and captured logs. */
export async function testRelay(overrides: Partial<Record<keyof Config, unknown>> = {}, options: TestRelayOptions = {}): Promise<TestRelay> {
  // The proxy variables come from the environment, not the schema (as `loadConfig` reads them).
  const { proxyEnv, ...settings } = overrides;
  const config: Config = {
    ...configSchema.parse({ fanoutThread: 'inline', secrets: [SECRET], database: settings.database ?? (await migratedSqliteFile()), port: 0, internalPort: 0, host: '127.0.0.1', internalHost: '127.0.0.1', ...settings }),
    proxyEnv: proxyEnv as Config['proxyEnv'],
  };
  const clock = options.clock ?? new ManualClock();
  const registry = new Registry();
  const logs = captureLogs();
  // The check for failing sinks runs only when a test fires its timers (`degradation`): on the wall clock's 15 s it
  // would announce boxrelay.sink.degraded in the middle of any test that fails a sink long enough.
  const relay = await createRelay({ config, logger: logs.logger, clock, registry, dispatch: options.dispatch, buses: options.buses, reconcile: options.reconcile, tracing: options.tracing, degradation: options.degradation ?? { timers: new HandTimers() } });
  // Every admin answer a test gets is checked against the OpenAPI document (test/support/admin-openapi.ts).
  if (config.adminToken) relay.internalApp = checkingAdminAnswers(relay.internalApp);
  const postTo: TestRelay['postTo'] = async (account, secret, options = {}) => {
    const d = delivery({ timestamp: clock.seconds, secret, ...options });
    const path = account === 'default' ? '/webhooks' : `/webhooks/${account}`;
    const response = await sendRaw(request(relay.publicApp).post(path).set(d.headers), d.body);
    return Object.assign(response, { deliveryId: d.id });
  };
  return {
    relay,
    config,
    clock,
    registry,
    logs,
    post: (options = {}) => postTo('default', SECRET, options),
    postTo,
    close: () => relay.stop(),
  };
}
