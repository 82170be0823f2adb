import { existsSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { SECRET_SETTINGS, withoutCredentials } from '../src/config/redact.js';
import { configKeys } from '../src/config/schema.js';
import { sqliteFile } from './support/databases.js';
import { requireBuild, runCli } from './support/process.js';
import { SECRET } from './support/sign.js';

/** Every credential the good configuration below holds: none may appear in what `config check` prints. */
const CREDENTIALS = {
  fileSecret: 'whsec_ZmlsZS1zZWNyZXQtY2hlY2stMDEyMzQ1Njc4OQ==',
  hookSecret: 'whsec_aG9vay1zZWNyZXQtY2hlY2stMDEyMzQ1Njc4OQ==',
  hookAuth: 'Bearer hook-auth-value-5c1e',
  hookApiKey: 'hook-api-key-77a0',
  slackToken: 'XoXbSlackTokenPath9d2',
  routingKey: 'pd-routing-key-0e41',
  adminToken: 'adm_secret_token_0123456789abcdef0123',
  natsToken: 'nats-token-6b3f',
  natsUrlPassword: 'nats-url-password-1f7a',
  databasePassword: 'db-password-8c2d',
  databaseQueryPassword: 'db-query-password-4e9b',
  amqpPassword: 'amqp-password-2a6c',
  redisPassword: 'redis-password-3b8e',
  mqttPassword: 'mqtt-password-5d1f',
  kafkaPassword: 'kafka-sasl-password-7e0a',
  upstreamApiKey: 'sk_upstream_api_key_9f3b',
  encryptionKey: 'a passphrase for the secrets table 6a2c',
  proxyPassword: 'proxy-password-0b5d',
  otelHeader: 'otel-api-key-1c7e',
};

/** A configuration using every kind of secret: env, the config file, the hooks file, the secrets file. */
function goodConfiguration(database: string): Record<string, string> {
  const dir = dirname(sqliteFile());
  const hooksFile = join(dir, 'hooks.yaml');
  writeFileSync(
    hooksFile,
    [
      '- name: ops',
      '  url: https://ops.example/events?token=' + CREDENTIALS.hookApiKey,
      `  secret: ${CREDENTIALS.hookSecret}`,
      '  headers:',
      `    Authorization: ${CREDENTIALS.hookAuth}`,
      `    X-Api-Key: ${CREDENTIALS.hookApiKey}`,
      '- name: chat',
      `  url: https://hooks.slack.com/services/T0/B0/${CREDENTIALS.slackToken}`,
      '  format: slack',
      '- name: pager',
      '  url: https://events.pagerduty.com/v2/enqueue',
      '  format: pagerduty',
      `  routingKey: ${CREDENTIALS.routingKey}`,
      '',
    ].join('\n'),
  );
  const configFile = join(dir, 'boxrelay.yaml');
  writeFileSync(
    configFile,
    [
      `adminToken: ${CREDENTIALS.adminToken}`,
      `natsUrl: nats://relay:${CREDENTIALS.natsUrlPassword}@nats-a:4222,nats://relay:${CREDENTIALS.natsUrlPassword}@nats-b:4222`,
      `natsToken: ${CREDENTIALS.natsToken}`,
      `hooksFile: ${hooksFile}`,
      '',
    ].join('\n'),
  );
  const secretsFile = join(dir, 'secrets');
  writeFileSync(secretsFile, `${CREDENTIALS.fileSecret}\n`);
  return {
    BOXRELAY_CONFIG: configFile,
    BOXRELAY_SECRETS: SECRET,
    BOXRELAY_SECRETS_FILE: secretsFile,
    BOXRELAY_DATABASE: database,
    BOXRELAY_AMQP_URL: `amqp://relay:${CREDENTIALS.amqpPassword}@rabbit:5672`,
    BOXRELAY_REDIS_URL: `redis://:${CREDENTIALS.redisPassword}@redis:6379`,
    BOXRELAY_MQTT_URL: `mqtt://relay:${CREDENTIALS.mqttPassword}@mqtt:1883`,
    BOXRELAY_KAFKA_BROKERS: 'kafka:9092',
    BOXRELAY_KAFKA_SASL_MECHANISM: 'plain',
    BOXRELAY_KAFKA_SASL_USERNAME: 'relay',
    BOXRELAY_KAFKA_SASL_PASSWORD: CREDENTIALS.kafkaPassword,
    BOXRELAY_UPSTREAM_BASE_URL: 'https://sandbox.example/v1',
    BOXRELAY_UPSTREAM_API_KEY: CREDENTIALS.upstreamApiKey,
    BOXRELAY_SECRETS_ENCRYPTION_KEY: CREDENTIALS.encryptionKey,
    HTTPS_PROXY: `http://relay:${CREDENTIALS.proxyPassword}@proxy.example:3128`,
    OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:1',
    OTEL_EXPORTER_OTLP_HEADERS: `x-api-key=${CREDENTIALS.otelHeader}`,
  };
}

describe('boxrelay config check', () => {
  beforeAll(requireBuild);

  it('prints the effective settings with every secret, token, key and password as ***, and exits 0 without opening the database', async () => {
    const database = `postgres://relay:${CREDENTIALS.databasePassword}@127.0.0.1:1/boxrelay?sslmode=require&password=${CREDENTIALS.databaseQueryPassword}`;
    const result = await runCli(['config', 'check'], goodConfiguration(database));
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    for (const [name, value] of Object.entries({ ...CREDENTIALS, signingSecret: SECRET })) {
      expect(result.stdout, name).not.toContain(value);
    }
    const shown = parseYaml(result.stdout) as Record<string, unknown>;
    expect(shown).toMatchObject({
      database: 'postgres://relay:***@127.0.0.1:1/boxrelay?sslmode=require&password=***',
      secrets: ['***'],
      adminToken: '***',
      natsToken: '***',
      natsUrl: 'nats://relay:***@nats-a:4222,nats://relay:***@nats-b:4222',
      amqpUrl: 'amqp://relay:***@rabbit:5672',
      redisUrl: 'redis://:***@redis:6379',
      mqttUrl: 'mqtt://relay:***@mqtt:1883',
      kafkaSaslUsername: 'relay',
      kafkaSaslPassword: '***',
      upstreamBaseUrl: 'https://sandbox.example/v1',
      upstreamApiKey: '***',
      secretsEncryptionKey: '***',
      proxyEnv: { httpsProxy: 'http://relay:***@proxy.example:3128' },
      // Defaults are part of the effective settings.
      port: 8080,
      retentionDays: 30,
      hooks: [
        { name: 'ops', url: 'https://ops.example/***', secret: '***', headers: { Authorization: '***', 'X-Api-Key': '***' } },
        { name: 'chat', url: 'https://hooks.slack.com/***', format: 'slack', headers: {} },
        { name: 'pager', url: 'https://events.pagerduty.com/***', format: 'pagerduty', routingKey: '***' },
      ],
    });
  });

  it('on SQLite creates no database file, and says when no signing secret is set outside the database', async () => {
    const database = sqliteFile();
    const result = await runCli(['config', 'check'], { BOXRELAY_DATABASE: database });
    expect(result.code).toBe(0);
    expect(result.stderr).toBe(
      'boxrelay: no signing secret in BOXRELAY_SECRETS or the secrets file: serve starts only if the database holds one (boxrelay upstream register)\n',
    );
    expect(parseYaml(result.stdout)).toMatchObject({ database, secrets: [], hooks: [] });
    expect(existsSync(database)).toBe(false);
    expect(existsSync(`${database}-lock`)).toBe(false);
  });

  it('exits 2 with one line per problem, as serve does, and prints no settings', async () => {
    const database = sqliteFile();
    const unusable = { PORT: 'x', BOXRELAY_NATS_MODE: 'fast', BOXRELAY_ADMIN_TOKEN: 'short', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:1', OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' };
    const settings = await runCli(['config', 'check'], { BOXRELAY_DATABASE: database, BOXRELAY_SECRETS: SECRET, ...unusable });
    expect(settings.code).toBe(2);
    expect(settings.stdout).toBe('');
    const lines = settings.stderr.trimEnd().split('\n');
    expect(lines).toHaveLength(4);
    expect(lines[0]).toMatch(/^boxrelay: invalid configuration: PORT: /);
    expect(lines[1]).toMatch(/^boxrelay: invalid configuration: BOXRELAY_NATS_MODE: /);
    expect(lines[2]).toMatch(/^boxrelay: invalid configuration: BOXRELAY_ADMIN_TOKEN: must be at least 32 characters/);
    expect(lines[3]).toMatch(/^boxrelay: invalid configuration: OTEL_EXPORTER_OTLP_PROTOCOL: "grpc" is not supported/);
    expect(settings.stderr).not.toContain('short');

    // Past the settings: the files they name, and the encryption key.
    const secretsFile = join(dirname(database), 'secrets');
    writeFileSync(secretsFile, `${SECRET} not-a-time\n`);
    const files = await runCli(['config', 'check'], {
      BOXRELAY_DATABASE: database,
      BOXRELAY_SECRETS_FILE: secretsFile,
      BOXRELAY_SECRETS_ENCRYPTION_KEY: 'base64:abc',
      BOXRELAY_HOOKS_FILE: join(dirname(database), 'missing-hooks.yaml'),
    });
    expect(files.code).toBe(2);
    expect(files.stderr).toBe(`boxrelay: invalid configuration: ${join(dirname(database), 'missing-hooks.yaml')}: cannot read (ENOENT)\n`);
    const secrets = await runCli(['config', 'check'], { BOXRELAY_DATABASE: database, BOXRELAY_SECRETS_FILE: secretsFile, BOXRELAY_SECRETS_ENCRYPTION_KEY: 'base64:abc' });
    expect(secrets.code).toBe(2);
    expect(secrets.stderr).toBe(
      [
        `boxrelay: invalid configuration: BOXRELAY_SECRETS_FILE (${secretsFile}): line 1: expiry is not an ISO-8601 time with a zone`,
        'boxrelay: invalid configuration: BOXRELAY_SECRETS_ENCRYPTION_KEY: base64: key must decode to 32 bytes',
        '',
      ].join('\n'),
    );
    expect(secrets.stderr).not.toContain(SECRET);
    expect(existsSync(database)).toBe(false);
  });
});

describe('what config check hides', () => {
  it('treats every setting named as a credential as one', () => {
    const named = configKeys.filter((key) => /token|password|apikey|encryptionkey|^secrets$/i.test(key));
    expect([...SECRET_SETTINGS].sort()).toEqual(named.sort());
  });

  it.each([
    ['postgres://relay:pw@db:5432/boxrelay', 'postgres://relay:***@db:5432/boxrelay'],
    ['postgres://relay@db/boxrelay?options=-c%20search_path%3Drelay', 'postgres://***@db/boxrelay?options=-c%20search_path%3Drelay'],
    ['postgres://db/boxrelay?user=relay&password=pw&sslkey=/k', 'postgres://db/boxrelay?user=relay&password=***&sslkey=***'],
    ['nats://t0ken@a:4222, nats://u:p@b:4222', 'nats://***@a:4222, nats://u:***@b:4222'],
    ['./data/boxrelay.db', './data/boxrelay.db'],
    ['https://sqs.eu-west-1.amazonaws.com/123/events', 'https://sqs.eu-west-1.amazonaws.com/123/events'],
  ])('%s shows as %s', (value, shown) => {
    expect(withoutCredentials(value)).toBe(shown);
  });
});
