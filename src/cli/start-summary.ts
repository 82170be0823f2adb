import { resolve } from 'node:path';
import { endpointOf } from '../config/default-account.js';
import { withoutCredentials } from '../config/redact.js';
import type { Config } from '../config/schema.js';
import { isPostgresUrl } from '../store/engines/database.js';
import { busNames } from '../sinks/buses.js';

export interface StartedPorts {
  port: number;
  internalPort: number;
}

/** An address a person can open from the same machine: a wildcard host is reached on the loopback. */
function reachableHost(host: string): string {
  if (host === '0.0.0.0' || host === '::' || host === '') return '127.0.0.1';
  return host.includes(':') ? `[${host}]` : host;
}

/**
 * What `serve` tells a person once it listens, in plain text beside the JSON log lines: both ports,
 * where the data is kept, which sinks are on (or that events go nowhere), and whether the admin API
 * and console are on. Nothing secret: a database URL loses its password, a token is never shown.
 */
export function startSummary(config: Config, ports: StartedPorts, version: string): string[] {
  const publicUrl = `http://${reachableHost(config.host)}:${ports.port}`;
  const internalUrl = `http://${reachableHost(config.internalHost)}:${ports.internalPort}`;
  const data = isPostgresUrl(config.database) ? `PostgreSQL ${withoutCredentials(config.database)}` : `SQLite file ${resolve(config.database)}`;
  const buses = busNames(config);
  const hooks = config.hooks.map((hook) => `hook ${hook.name}`);
  const sinks =
    buses.length + hooks.length > 0
      ? `sinks on: ${[...buses, ...hooks].join(', ')}`
      : 'no sinks: events are stored and go nowhere; add one with BOXRELAY_NATS_URL (or another bus: docs/buses.md) or a hooks file in BOXRELAY_HOOKS_FILE (docs/hooks.md)';
  const admin = config.adminToken
    ? `admin API and console on: ${internalUrl}/console (sign in with BOXRELAY_ADMIN_TOKEN), ${internalUrl}/admin/*`
    : 'admin API and console off (/admin and /console answer 404): set BOXRELAY_ADMIN_TOKEN to 32 or more characters (openssl rand -hex 32) to turn them on';
  // Each further account of contract section 21 has an endpoint of its own beside the default one.
  const accounts = config.accounts.length > 0 ? ` (accounts: ${config.accounts.map(({ name }) => endpointOf(name)).join(', ')})` : '';
  return [
    `version ${version} listening: webhooks on ${publicUrl}/webhooks${accounts} (port ${ports.port}); /metrics, /admin and /console on ${internalUrl} (port ${ports.internalPort})`,
    `data kept in ${data}`,
    sinks,
    admin,
  ];
}
