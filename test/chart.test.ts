// Checks of the deployment files: the Helm chart (helm/boxrelay), rendered and linted by the real
// helm (test/support/helm.ts) and validated against the Kubernetes and prometheus-operator schemas,
// and the Dockerfile; against the relay contract (docs/relay-contract.md), the docs and package.json.
import { afterAll, beforeAll, describe, it, expect } from 'vitest';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { createTracing } from '../src/tracing/tracing.js';
import { loadConfig } from '../src/config/load.js';
import { accountsSchema, configKeys, envNameOf, hooksSchema, type ConfigKey } from '../src/config/schema.js';
import YAML from 'yaml';
import semver from 'semver';
import { unpackHelm, validateObject, type Helm, type K8sObject } from './support/helm.js';

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const chartDir = path.join(repoRoot, 'helm', 'boxrelay');
const contractPath = path.join(repoRoot, 'docs', 'relay-contract.md');

const read = (p: string): string => fs.readFileSync(p, 'utf8');
type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Parses one YAML document strictly: any error or warning fails. */
function parseYaml(file: string): unknown {
  const doc = YAML.parseDocument(read(file), { uniqueKeys: true });
  expect(doc.errors.map(String), `${file}: YAML errors`).toEqual([]);
  expect(doc.warnings.map(String), `${file}: YAML warnings`).toEqual([]);
  return doc.toJS();
}

/** The text of a `## N. Title` section of a markdown document (up to the next `## `). */
function section(md: string, heading: RegExp): string {
  const lines = md.split('\n');
  const start = lines.findIndex((l) => heading.test(l));
  if (start < 0) throw new Error(`contract: no section matching ${heading}`);
  const rest = lines.slice(start + 1);
  const end = rest.findIndex((l) => l.startsWith('## '));
  return (end < 0 ? rest : rest.slice(0, end)).join('\n');
}

const backticked = (s: string): string[] => [...s.matchAll(/`([^`]+)`/g)].map((m) => m[1]!);

/**
 * The contract's configuration table: variable name -> default (undefined when "none", or when the
 * default is prose such as "the retention window": derived by the relay, so the chart leaves it empty).
 */
function contractVariables(): Map<string, string | undefined> {
  // Section 1's table, and the tables of sections that bring settings of their own (9: reconciliation).
  const table = [/^## 1\. Configuration/, /^## 9\. Reconciliation/].map((heading) => section(read(contractPath), heading)).join('\n');
  const vars = new Map<string, string | undefined>();
  for (const line of table.split('\n')) {
    if (!line.startsWith('| `')) continue; // header, separator and prose lines
    const cells = line.split('|').map((c) => c.trim());
    const names = backticked(cells[1]!).filter((n) => /^[A-Z][A-Z0-9_]*$/.test(n));
    const defaults = backticked(cells[2]!);
    const none = cells[2] === 'none' || defaults.length === 0;
    if (!none && defaults.length !== names.length) {
      throw new Error(`contract: cannot pair variables and defaults in row: ${line}`);
    }
    names.forEach((name, i) => vars.set(name, none ? undefined : defaults[i]));
  }
  return vars;
}

/**
 * The contract's own rule (section 1): a setting's key is the variable's name without
 * `BOXRELAY_`, in camelCase. PORT -> port, LOG_LEVEL -> logLevel,
 * BOXRELAY_NATS_TLS_CA_FILE -> natsTlsCaFile. values.yaml `config.<key>` uses the same keys.
 */
const keyOf = (envName: string): string =>
  envName
    .replace(/^BOXRELAY_/, '')
    .toLowerCase()
    .replace(/_([a-z0-9])/g, (_m, c: string) => c.toUpperCase());

/**
 * Contract variables that are not `config.*` keys: secrets (from a Secret, under `secrets.*`)
 * and the file paths the chart sets itself when it mounts a Secret. Value: the values.yaml entry
 * that controls it, or null when the chart does not render the variable at all.
 */
const SECRET_VARS: Record<string, string | null> = {
  // The chart uses the secrets file instead (rotation without restart); extraEnv can still set it.
  BOXRELAY_SECRETS: null,
  BOXRELAY_SECRETS_FILE: 'secrets.signing',
  BOXRELAY_HOOKS_FILE: 'secrets.hooks',
  BOXRELAY_ACCOUNTS_FILE: 'secrets.accounts',
  BOXRELAY_ADMIN_TOKEN: 'secrets.adminToken',
  // postgres:// URL from a Secret; else /data/boxrelay.db on the StatefulSet's volume.
  BOXRELAY_DATABASE: 'secrets.postgres',
  BOXRELAY_NATS_CREDS_FILE: 'secrets.nats',
  BOXRELAY_NATS_TOKEN: 'secrets.nats',
  BOXRELAY_NATS_USER: 'secrets.nats',
  BOXRELAY_NATS_PASSWORD: 'secrets.nats',
  BOXRELAY_UPSTREAM_API_KEY: 'secrets.upstreamApiKey',
  // The buses' URLs may hold a password (contract section 12).
  BOXRELAY_AMQP_URL: 'secrets.amqpUrl',
  BOXRELAY_REDIS_URL: 'secrets.redisUrl',
  BOXRELAY_MQTT_URL: 'secrets.mqttUrl',
  BOXRELAY_KAFKA_SASL_PASSWORD: 'secrets.kafkaSaslPassword',
  // boxrelay's own setting (docs/reference/configuration.md).
  BOXRELAY_SECRETS_ENCRYPTION_KEY: 'secrets.secretsEncryptionKey',
};

/** Variables the relay itself reads: the contract's plus its documented extensions. */
const relayVariables = new Set(configKeys.map(envNameOf));

function valueAt(root: unknown, dotted: string): { found: boolean; value: unknown } {
  let cur: unknown = root;
  for (const part of dotted.split('.')) {
    if (!isObj(cur) || !(part in cur)) return { found: false, value: undefined };
    cur = cur[part];
  }
  return { found: true, value: cur };
}

function templateFiles(): string[] {
  const dir = path.join(chartDir, 'templates');
  return fs
    .readdirSync(dir)
    .filter((f) => /\.(ya?ml|tpl|txt)$/.test(f))
    .map((f) => path.join(dir, f));
}

const values = (): Obj => parseYaml(path.join(chartDir, 'values.yaml')) as Obj;
const pkg = (): { version: string; bin: Record<string, string>; engines?: { node?: string }; scripts?: Record<string, string> } =>
  JSON.parse(read(path.join(repoRoot, 'package.json')));

describe('chart: plain YAML files', () => {
  const plain = [
    path.join(chartDir, 'Chart.yaml'),
    path.join(chartDir, 'values.yaml'),
    ...fs
      .readdirSync(path.join(chartDir, 'files'))
      .filter((f) => /\.ya?ml$/.test(f))
      .map((f) => path.join(chartDir, 'files', f)),
  ];

  it.each(plain.map((p) => [path.relative(repoRoot, p), p]))('%s parses', (_rel, file) => {
    expect(parseYaml(file)).toBeTruthy();
  });

  it('Chart.yaml names the chart and tracks package.json version', () => {
    const chart = parseYaml(path.join(chartDir, 'Chart.yaml')) as Obj;
    expect(chart.apiVersion).toBe('v2');
    expect(chart.name).toBe('boxrelay');
    expect(chart.type).toBe('application');
    expect(String(chart.version)).toMatch(/^\d+\.\d+\.\d+/);
    expect(String(chart.appVersion)).toBe(pkg().version);
  });
});

describe('chart: values.yaml config <-> contract variables', () => {
  const contract = contractVariables();
  const config = values().config as Obj;

  it('the contract table was read', () => {
    for (const v of ['PORT', 'BOXRELAY_INTERNAL_PORT', 'BOXRELAY_SECRETS_FILE', 'LOG_LEVEL']) {
      expect(contract.has(v), v).toBe(true);
    }
  });

  it('every secret-managed variable is a setting of the relay with a values entry', () => {
    for (const [envName, valuesPath] of Object.entries(SECRET_VARS)) {
      expect(contract.has(envName) || relayVariables.has(envName), `${envName} is not a setting of the relay`).toBe(true);
      if (valuesPath === null) continue;
      const entry = valueAt(values(), valuesPath);
      expect(entry.found, `values.yaml lacks ${valuesPath}`).toBe(true);
      expect(isObj(entry.value) && typeof entry.value.existingSecret === 'string', `${valuesPath}.existingSecret`).toBe(
        true,
      );
    }
    // ... and every secrets.* entry serves a contract variable.
    const used = new Set(Object.values(SECRET_VARS).filter((p): p is string => p !== null));
    for (const key of Object.keys(values().secrets as Obj)) {
      expect(used.has(`secrets.${key}`), `secrets.${key} maps to no contract variable`).toBe(true);
    }
  });

  it('every config key is a setting of the relay, documented in the contract or the configuration reference', () => {
    const reference = read(path.join(repoRoot, 'docs', 'reference', 'configuration.md'));
    const byKey = new Map(configKeys.map((k) => [k as string, envNameOf(k)]));
    for (const key of Object.keys(config)) {
      const envName = byKey.get(key);
      expect(envName, `config.${key} is not a setting of the relay`).toBeDefined();
      expect(envName! in SECRET_VARS, `config.${key} is a secret: it belongs under secrets.*`).toBe(false);
      const documented = contract.has(envName!) || read(contractPath).includes(`\`${envName}\``) || reference.includes(`\`${envName}\``);
      expect(documented, `${envName} is documented`).toBe(true);
    }
  });

  it('every setting of the relay has a config key or a secrets entry', () => {
    for (const key of configKeys) {
      const envName = envNameOf(key);
      if (envName in SECRET_VARS || CHART_SET.has(key)) continue;
      expect(Object.keys(config), `${envName} has no config.${key}`).toContain(key);
    }
  });

  it('config defaults are the contract defaults (empty = unset where the contract says none)', () => {
    for (const [v, def] of contract) {
      if (v in SECRET_VARS) continue;
      const value = config[keyOf(v)];
      expect(isObj(value) || Array.isArray(value), `config.${keyOf(v)} must be a scalar`).toBe(false);
      expect(String(value), `config.${keyOf(v)} (${v})`).toBe(def ?? '');
    }
  });

  it("config defaults are the relay's own defaults (empty = the relay's or the chart's)", () => {
    const relayDefaults = loadConfig({ env: {} });
    const fromValues = loadConfig({ env: Object.fromEntries(Object.entries(config).map(([k, v]) => [envNameOf(k as ConfigKey), String(v)])) });
    for (const key of Object.keys(config) as ConfigKey[]) {
      expect(fromValues[key], `config.${key}`).toEqual(relayDefaults[key]);
    }
  });
});

/** Settings the chart sets itself rather than under config.* (with their reason). */
const CHART_SET = new Set<ConfigKey>([
  // The hooks of the hooks file (secrets.hooks); the key exists for the config file only.
  'hooks',
  // The accounts file (secrets.accounts, contract section 21): a Secret, as it holds secrets and API keys.
  'accountsFile',
  'accounts',
  // backup.*: the directory is the backup volume's mount, set with it.
  'backupDir',
  'backupInterval',
  'backupKeep',
]);

/** Value sets, each rendered, linted and validated. */
const ALL_CONFIG = {
  natsUrl: 'nats://nats.nats.svc:4222',
  natsMaxAge: '2d',
  natsTlsCaFile: '/etc/boxrelay/ca/ca.pem',
  amqpQueue: 'sandbox-events',
  kafkaBrokers: 'kafka-0.kafka:9092,kafka-1.kafka:9092',
  kafkaSaslMechanism: 'scram-sha-512',
  kafkaSaslUsername: 'relay',
  kafkaTls: true,
  kafkaTlsCaFile: '/etc/boxrelay/ca/ca.pem',
  awsRegion: 'eu-west-1',
  awsEndpoint: 'https://vpce-0a1b.sqs.eu-west-1.vpce.amazonaws.com',
  sqsQueueUrl: 'https://sqs.eu-west-1.amazonaws.com/123456789012/sandbox-events.fifo',
  snsTopicArn: 'arn:aws:sns:eu-west-1:123456789012:sandbox-events',
  s3Archive: 's3://acme-archive/boxrelay',
  upstreamBaseUrl: 'https://sandbox.example.com',
  outboxLeaseMs: 90000,
  shutdownTimeoutMs: 20000,
};
const MATRIX: Record<string, Obj> = {
  defaults: {},
  'PostgreSQL with replicas': { replicaCount: 3, secrets: { postgres: { url: 'postgres://relay@db.example:5432/relay' } } },
  'every optional part on': {
    config: ALL_CONFIG,
    imagePullSecrets: [{ name: 'registry' }],
    secrets: {
      signing: { secrets: ['whsec_new', 'whsec_old 2026-12-01T00:00:00Z'] },
      hooks: {
        hooks: [
          { name: 'alerts', url: 'https://hooks.example/box', events: ['box.error'] },
          {
            name: 'private',
            url: 'https://hooks.internal/box',
            format: 'cloudevents',
            secret: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw',
            headers: { Authorization: 'Bearer x' },
            timeoutMs: 5000,
            maxAttempts: 8,
            concurrency: 4,
            ordering: 'per-box',
            pauseAfter: '10m',
            proxy: 'direct',
            tls: { ca: '/etc/boxrelay/hook-tls/ca.pem', cert: '/etc/boxrelay/hook-tls/client.pem', key: '/etc/boxrelay/hook-tls/client.key' },
            filter: 'event.data.box.name.startsWith("prod-")',
            maxPerSecond: 5,
          },
          { name: 'pager', url: 'https://events.pagerduty.com/v2/enqueue', format: 'pagerduty', routingKey: 'R0123456789abcdef0123456789abcde' },
          { name: 'shaped', url: 'https://status.internal/api', transform: '{"box": event.data.box.id}', contentType: 'application/vnd.status+json' },
        ],
      },
      accounts: {
        accounts: [
          { name: 'staging', secrets: ['whsec_c3RhZ2luZy1jaGFydC1zZWNyZXQtMDEyMzQ1'], upstreamBaseUrl: 'https://sandbox.example.com/v1', upstreamApiKey: 'sk_staging' },
          { name: 'team-b', secretsFile: '/etc/boxrelay/team-b/secrets', cloudEventsSource: 'sandbox/b', natsSubjectPrefix: 'sandbox-b' },
        ],
      },
      adminToken: { value: 'c0ffee'.repeat(11) },
      nats: { auth: 'creds', creds: '-----BEGIN NATS USER JWT-----' },
      upstreamApiKey: { value: 'key' },
      secretsEncryptionKey: { value: 'passphrase' },
      amqpUrl: { value: 'amqp://relay:pw@rabbitmq.bus.svc:5672/%2F' },
      redisUrl: { existingSecret: 'redis-credentials', key: 'url' },
      mqttUrl: { value: 'mqtt://mosquitto.bus.svc:1883' },
      kafkaSaslPassword: { value: 'kafka-password' },
    },
    persistence: { storageClass: 'fast', annotations: { a: 'b' } },
    backup: { enabled: true, interval: '6h', keep: 3, size: '64Gi', storageClass: 'slow', annotations: { c: 'd' } },
    ingress: { enabled: true, className: 'nginx' },
    networkPolicy: {
      enabled: true,
      publicFrom: [{ namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'ingress' } } }],
      internalFrom: [{ namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'monitoring' } } }],
    },
    serviceMonitor: { enabled: true, additionalLabels: { release: 'kube-prometheus-stack' } },
    prometheusRule: { enabled: true },
    grafanaDashboard: { enabled: true, namespace: 'monitoring', annotations: { grafana_folder: 'Relays' } },
    tracing: { endpoint: 'http://otel-collector.observability:4318', protocol: 'http/json', sampler: 'parentbased_traceidratio', samplerArg: '0.25' },
    proxy: { httpsProxy: 'http://proxy.corp:3128', httpProxy: 'http://proxy.corp:3128', noProxy: 'localhost,127.0.0.0/8,.svc' },
    podAnnotations: { a: 'b' },
    podLabels: { team: 'relay' },
    extraEnv: [{ name: 'NODE_OPTIONS', value: '--max-old-space-size=200' }],
    extraVolumes: [{ name: 'ca', configMap: { name: 'ca' } }],
    extraVolumeMounts: [{ name: 'ca', mountPath: '/etc/boxrelay/ca', readOnly: true }],
    nodeSelector: { 'kubernetes.io/os': 'linux' },
    tolerations: [{ key: 'relay', operator: 'Exists', effect: 'NoSchedule' }],
    topologySpreadConstraints: [
      { maxSkew: 1, topologyKey: 'kubernetes.io/hostname', whenUnsatisfiable: 'ScheduleAnyway', labelSelector: { matchLabels: { a: 'b' } } },
    ],
    priorityClassName: 'high',
  },
};

/** The relay container's (or the migration Job's) environment: plain values, and Secret references as `secret:<name>/<key>`. */
function containerEnv(objects: K8sObject[], kind?: 'Job'): Map<string, string> {
  const workload = objects.find((o) => (kind ? o.kind === kind : o.kind === 'StatefulSet' || o.kind === 'Deployment')) as Obj | undefined;
  expect(workload, 'a workload').toBeDefined();
  const pod = (valueAt(workload, 'spec.template.spec').value as { containers: { name: string; env: Obj[] }[] });
  const env = pod.containers[0]!.env;
  const names = env.map((e) => String(e.name));
  expect(names.filter((n, i) => names.indexOf(n) !== i), 'variables set twice').toEqual([]);
  return new Map(
    env.map((e) => {
      const ref = valueAt(e, 'valueFrom.secretKeyRef').value as { name: string; key: string } | undefined;
      return [String(e.name), ref ? `secret:${ref.name}/${ref.key}` : String(e.value)];
    }),
  );
}

const kinds = (objects: K8sObject[]): string[] => objects.map((o) => o.kind).sort();
const byKind = (objects: K8sObject[], kind: string): K8sObject[] => objects.filter((o) => o.kind === kind);

describe('chart: rendered by helm', () => {
  let helm: Helm;
  const render = (values: Obj): K8sObject[] => helm.template(chartDir, values);
  const refused = (args: string[]): string => {
    const r = helm.run(['template', 'relay', chartDir, ...args]);
    expect(r.status, r.stdout).not.toBe(0);
    return r.stderr;
  };
  beforeAll(() => {
    helm = unpackHelm();
  });
  afterAll(() => helm?.remove());

  it.each(Object.keys(MATRIX))('helm lint --strict: %s', (name) => {
    const r = helm.run(['lint', '--strict', chartDir, '-f', helm.valuesFile(MATRIX[name]!)]);
    expect(r.stdout + r.stderr).toContain('1 chart(s) linted, 0 chart(s) failed');
    expect(r.status, r.stdout + r.stderr).toBe(0);
  });

  it.each(Object.keys(MATRIX))('every object rendered from %s is valid against its schema', async (name) => {
    const objects = render(MATRIX[name]!);
    expect(objects.length).toBeGreaterThan(0);
    for (const obj of objects) {
      await expect(validateObject(obj), `${obj.kind} ${obj.metadata.name}`).resolves.toBeUndefined();
    }
  });

  it('the schema check refuses a broken object (it is not a no-op)', async () => {
    const service = { apiVersion: 'v1', kind: 'Service', metadata: { name: 'x' }, spec: { ports: [{ port: 'eighty' }] } };
    await expect(validateObject(service)).rejects.toThrow(/port must be integer/);
    const monitor = { apiVersion: 'monitoring.coreos.com/v1', kind: 'ServiceMonitor', metadata: { name: 'x' }, spec: { selector: {}, endpoints: [{ interval: 'often' }] } };
    await expect(validateObject(monitor)).rejects.toThrow(/interval must match pattern/);
  });

  it('renders the expected objects for each value set', () => {
    expect(kinds(render(MATRIX.defaults!))).toEqual(['PodDisruptionBudget', 'Service', 'Service', 'Service', 'ServiceAccount', 'StatefulSet']);
    // The migration Job comes with its own copies of the Secret and the ServiceAccount.
    expect(kinds(render(MATRIX['PostgreSQL with replicas']!))).toEqual([
      'Deployment', 'Job', 'PodDisruptionBudget', 'Secret', 'Secret', 'Service', 'Service', 'ServiceAccount', 'ServiceAccount',
    ]);
    expect(kinds(render(MATRIX['every optional part on']!))).toEqual([
      'ConfigMap', 'Ingress', 'NetworkPolicy', 'PersistentVolumeClaim', 'PodDisruptionBudget', 'PrometheusRule', 'Secret', 'Service', 'Service', 'Service',
      'ServiceAccount', 'ServiceMonitor', 'StatefulSet',
    ]);
  });

  it('the schema refuses unknown keys and wrong types', () => {
    expect(refused(['--set', 'config.tolerance=60'])).toMatch(/additional properties 'tolerance' not allowed/);
    expect(refused(['--set', 'config.port=eighty'])).toMatch(/config\/port.*want integer/);
    expect(refused(['--set', 'replicas=2'])).toMatch(/additional properties 'replicas' not allowed/);
    expect(refused(['--set', 'config.natsMode=fast'])).toMatch(/config\/natsMode/);
    expect(refused(['--set', 'config.mqttTopicPrefix=a/+'])).toMatch(/config\/mqttTopicPrefix/);
    expect(refused(['--set', 'config.kafkaBrokers=kafka-0'])).toMatch(/config\/kafkaBrokers/);
    expect(refused(['--set', 'config.kafkaSaslMechanism=gssapi'])).toMatch(/config\/kafkaSaslMechanism/);
    expect(refused(['--set', 'secrets.redisUrl.value=http://x'])).toMatch(/secrets\/redisUrl\/value/);
    expect(refused(['--set', 'serviceMonitor.enabeld=true'])).toMatch(/'enabeld' not allowed/);
  });

  it('renders each config key as its environment variable, and the relay accepts that environment', () => {
    const objects = render({ config: ALL_CONFIG });
    const env = containerEnv(objects);
    const config = { ...(values().config as Obj), ...ALL_CONFIG };
    for (const [key, value] of Object.entries(config)) {
      expect(env.get(envNameOf(key as ConfigKey)), `config.${key}`).toBe(String(value));
    }
    // The SASL password comes from secrets.*; the Kafka CA file is read at start-up (from extraVolumes in a pod).
    const loaded = loadConfig({ env: { ...Object.fromEntries(env), BOXRELAY_KAFKA_SASL_PASSWORD: 'pw' }, readFile: () => '-----BEGIN CERTIFICATE-----\n' });
    expect(loaded.natsMaxAge).toBe(2 * 86_400_000);
    expect([loaded.kafkaBrokers, loaded.kafkaTls]).toEqual([['kafka-0.kafka:9092', 'kafka-1.kafka:9092'], true]);
    expect(loaded.outboxLeaseMs).toBe(90000);
    expect(loaded.shutdownTimeoutMs).toBe(20000);
    // Without config.shutdownTimeoutMs, it follows the grace period (40 - 5 s shutdown delay - 10 seconds).
    expect(containerEnv(render({})).get('BOXRELAY_SHUTDOWN_TIMEOUT_MS')).toBe('25000');
  });

  /** The pod's grace period in ms, and what the relay may take of it after SIGTERM (preStop, delay, budget). */
  const shutdownFits = (objects: K8sObject[]) => {
    const workload = objects.find((o) => o.kind === 'StatefulSet' || o.kind === 'Deployment') as Obj;
    const pod = valueAt(workload, 'spec.template.spec').value as { terminationGracePeriodSeconds: number; containers: Obj[] };
    const preStop = valueAt(pod.containers[0], 'lifecycle.preStop.exec.command').value as string[] | undefined;
    const loaded = loadConfig({ env: Object.fromEntries(containerEnv(objects)) });
    const needed = Number(preStop?.[1] ?? 0) * 1000 + loaded.shutdownDelay + loaded.shutdownTimeoutMs;
    return { graceMs: pod.terminationGracePeriodSeconds * 1000, needed };
  };

  it.each<[string, Obj]>([
    ['defaults', {}],
    ['a longer delay', { config: { shutdownDelay: '30s' }, terminationGracePeriodSeconds: 60 }],
    ['a delay in ms and a preStop sleep', { config: { shutdownDelay: '1500ms' }, preStopSleepSeconds: 5 }],
    ['a budget set by hand', { config: { shutdownDelay: '1m', shutdownTimeoutMs: 20000 }, terminationGracePeriodSeconds: 90 }],
    ['no delay', { config: { shutdownDelay: '0' } }],
  ])("the pod's grace period holds the shutdown delay and the shutdown budget, with 10 s to spare: %s", (_name, values) => {
    const { graceMs, needed } = shutdownFits(render(values));
    expect(graceMs - needed).toBeGreaterThanOrEqual(10_000);
  });

  it('refuses a grace period that cannot hold the shutdown delay and budget, and a short admin token', () => {
    expect(refused(['--set', 'config.shutdownDelay=1m'])).toContain('terminationGracePeriodSeconds (40) must cover');
    expect(refused(['--set', 'config.shutdownTimeoutMs=30000'])).toContain('terminationGracePeriodSeconds (40) must cover');
    expect(refused(['--set', 'config.shutdownDelay=soon'])).toMatch(/config\/shutdownDelay/);
    expect(refused(['--set', 'secrets.adminToken.value=change-me'])).toMatch(/secrets\/adminToken\/value/);
    expect(containerEnv(render({ config: { shutdownDelay: '0' } })).get('BOXRELAY_SHUTDOWN_DELAY')).toBe('0');
  });

  it('sets the OTEL_* variables from tracing.* only when an endpoint is given, and the relay accepts them', () => {
    expect([...containerEnv(render({})).keys()].filter((k) => k.startsWith('OTEL_'))).toEqual([]);
    const env = containerEnv(render(MATRIX['every optional part on']!));
    const otel = Object.fromEntries([...env].filter(([k]) => k.startsWith('OTEL_')));
    expect(otel).toEqual({
      OTEL_EXPORTER_OTLP_ENDPOINT: 'http://otel-collector.observability:4318',
      OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
      OTEL_SERVICE_NAME: 'boxrelay',
      OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
      OTEL_TRACES_SAMPLER_ARG: '0.25',
    });
    const tracing = createTracing(otel);
    expect(tracing.enabled).toBe(true);
    return tracing.shutdown();
  });

  it('sets HTTPS_PROXY, HTTP_PROXY and NO_PROXY from proxy.* only when given, and the relay reads them', () => {
    expect([...containerEnv(render({})).keys()].filter((k) => k.endsWith('_PROXY'))).toEqual([]);
    const env = containerEnv(render(MATRIX['every optional part on']!));
    const proxies = Object.fromEntries([...env].filter(([k]) => k.endsWith('_PROXY')));
    expect(proxies).toEqual({ HTTPS_PROXY: 'http://proxy.corp:3128', HTTP_PROXY: 'http://proxy.corp:3128', NO_PROXY: 'localhost,127.0.0.0/8,.svc' });
    expect(loadConfig({ env: proxies }).proxyEnv).toEqual({ httpsProxy: 'http://proxy.corp:3128', httpProxy: 'http://proxy.corp:3128', noProxy: 'localhost,127.0.0.0/8,.svc' });
  });

  it('the hooks of values follow the relay: every setting accepted, a wrong one refused', () => {
    const withHook = (extra: Obj) => ({ secrets: { hooks: { hooks: [{ name: 'h', url: 'https://hooks.example/x', ...extra }] } } });
    const hooks = (MATRIX['every optional part on']!.secrets as { hooks: { hooks: unknown[] } }).hooks.hooks;
    // What the chart takes, the relay takes (the TLS files aside, which exist only in the pod).
    expect(hooksSchema.parse(hooks.map((h) => ({ ...(h as Obj), tls: undefined }))).map((h) => h.name)).toEqual(['alerts', 'private', 'pager', 'shaped']);
    for (const wrong of [{ maxPerSecond: 0 }, { proxy: 'socks5://proxy:1080' }, { tls: { ca: '' } }, { tls: { pem: '/x' } }, { filter: '' }, { transform: '' }, { format: 'msteams' }, { colour: 'red' }]) {
      expect(() => render(withHook(wrong)), JSON.stringify(wrong)).toThrow();
    }
  });

  it('the accounts of values follow the relay: the file mounted from a Secret, every setting accepted, a wrong one refused', () => {
    const rendered = render(MATRIX['every optional part on']!);
    expect(containerEnv(rendered).get('BOXRELAY_ACCOUNTS_FILE')).toBe('/etc/boxrelay/accounts/accounts.yaml');
    const accounts = (MATRIX['every optional part on']!.secrets as { accounts: { accounts: unknown[] } }).accounts.accounts;
    expect(accountsSchema.parse(accounts).map((account) => account.name)).toEqual(['staging', 'team-b']);
    const withAccount = (account: Obj) => ({ secrets: { accounts: { accounts: [{ name: 'a', secrets: ['whsec_x'], ...account }] } } });
    expect(containerEnv(render(withAccount({}))).get('BOXRELAY_ACCOUNTS_FILE')).toBe('/etc/boxrelay/accounts/accounts.yaml');
    expect(containerEnv(render({ secrets: { accounts: { existingSecret: 'relay-accounts' } } })).get('BOXRELAY_ACCOUNTS_FILE')).toBe('/etc/boxrelay/accounts/accounts.yaml');
    expect(containerEnv(render({})).has('BOXRELAY_ACCOUNTS_FILE')).toBe(false);
    for (const wrong of [{ name: 'default' }, { name: 'Prod' }, { upstreamBaseUrl: 'ftp://x' }, { natsSubjectPrefix: 'a b' }, { colour: 'red' }]) {
      expect(() => render(withAccount(wrong)), JSON.stringify(wrong)).toThrow();
    }
  });

  it('refuses tracing values the relay cannot use', () => {
    expect(() => render({ tracing: { endpoint: 'http://c:4318', protocol: 'grpc' } })).toThrow();
  });

  it('sets the secret-managed variables (and not BOXRELAY_SECRETS)', () => {
    const env = containerEnv(render(MATRIX['every optional part on']!));
    for (const [envName, valuesPath] of Object.entries(SECRET_VARS)) {
      if (envName === 'BOXRELAY_DATABASE' || valuesPath === 'secrets.nats') continue; // below
      expect(env.has(envName), envName).toBe(valuesPath !== null);
    }
    expect(env.get('BOXRELAY_DATABASE')).toBe('/data/boxrelay.db');
    expect(env.get('BOXRELAY_NATS_CREDS_FILE')).toBe('/etc/boxrelay/nats/nats.creds');
    expect([env.get('BOXRELAY_AMQP_URL'), env.get('BOXRELAY_REDIS_URL'), env.get('BOXRELAY_MQTT_URL')]).toEqual([
      'secret:relay-boxrelay/amqp-url', 'secret:redis-credentials/url', 'secret:relay-boxrelay/mqtt-url',
    ]);
    expect([...containerEnv(render({})).keys()].filter((k) => /^BOXRELAY_(AMQP|REDIS|MQTT)_URL$/.test(k))).toEqual([]);
    expect([env.get('BOXRELAY_KAFKA_BROKERS'), env.get('BOXRELAY_KAFKA_TLS'), env.get('BOXRELAY_KAFKA_SASL_PASSWORD')]).toEqual([
      'kafka-0.kafka:9092,kafka-1.kafka:9092', 'true', 'secret:relay-boxrelay/kafka-sasl-password',
    ]);
    expect([...containerEnv(render({})).keys()].filter((k) => k.startsWith('BOXRELAY_KAFKA_') && !['BOXRELAY_KAFKA_TOPIC', 'BOXRELAY_KAFKA_CLIENT_ID', 'BOXRELAY_KAFKA_TLS', 'BOXRELAY_KAFKA_ORDERING'].includes(k))).toEqual([]);
    expect(containerEnv(render(MATRIX['PostgreSQL with replicas']!)).get('BOXRELAY_DATABASE')).toBe('secret:relay-boxrelay/database-url');
    const token = containerEnv(render({ secrets: { nats: { auth: 'token', token: 't' } } }));
    expect(token.get('BOXRELAY_NATS_TOKEN')).toBe('secret:relay-boxrelay/nats-token');
    const user = containerEnv(render({ secrets: { nats: { auth: 'userPassword', user: 'u', password: 'p' } } }));
    expect([user.get('BOXRELAY_NATS_USER'), user.get('BOXRELAY_NATS_PASSWORD')]).toEqual([
      'secret:relay-boxrelay/nats-user', 'secret:relay-boxrelay/nats-password',
    ]);
  });

  it('keeps SQLite to one replica on a ReadWriteOnce volume behind a headless Service, and refuses more without PostgreSQL', () => {
    const objects = render(MATRIX.defaults!);
    const [sts] = byKind(objects, 'StatefulSet') as Obj[];
    expect(valueAt(sts, 'spec.replicas').value).toBe(1);
    expect(valueAt(sts, 'spec.volumeClaimTemplates').value).toMatchObject([{ spec: { accessModes: ['ReadWriteOnce'] } }]);
    const headless = byKind(objects, 'Service').find((s) => s.metadata.name === valueAt(sts, 'spec.serviceName').value) as Obj;
    expect(headless, 'the StatefulSet names a rendered Service').toBeDefined();
    expect(valueAt(headless, 'spec.clusterIP').value).toBe('None');
    expect(valueAt(headless, 'spec.selector').value).toEqual(valueAt(sts, 'spec.selector.matchLabels').value);

    expect(refused(['--set', 'replicaCount=2'])).toContain('replicaCount > 1 needs PostgreSQL');
    const pg = render(MATRIX['PostgreSQL with replicas']!);
    expect(byKind(pg, 'StatefulSet')).toEqual([]);
    expect(valueAt(byKind(pg, 'Deployment')[0], 'spec.replicas').value).toBe(3);
    expect(byKind(pg, 'Service').map((s) => valueAt(s, 'spec.clusterIP').value)).not.toContain('None');
  });

  it('with PostgreSQL, runs `boxrelay migrate` in a pre-install and pre-upgrade hook Job with the relay\'s image, environment and Secrets', () => {
    const values = { ...MATRIX['PostgreSQL with replicas']!, secrets: { ...(MATRIX['every optional part on']!.secrets as Obj), postgres: { url: 'postgres://relay@db.example:5432/relay' } } };
    const objects = render(values);
    const [job] = byKind(objects, 'Job') as Obj[];
    const [deployment] = byKind(objects, 'Deployment') as Obj[];
    const hook = (o: unknown) => valueAt(o, 'metadata.annotations').value as Record<string, string>;
    expect(hook(job)).toEqual({
      'helm.sh/hook': 'pre-install,pre-upgrade',
      'helm.sh/hook-weight': '0',
      'helm.sh/hook-delete-policy': 'before-hook-creation,hook-succeeded',
    });
    const pod = valueAt(job, 'spec.template.spec').value as { restartPolicy: string; serviceAccountName: string; containers: Obj[]; volumes: Obj[] };
    const relayPod = valueAt(deployment, 'spec.template.spec').value as { containers: Obj[]; volumes: Obj[] };
    expect(pod.restartPolicy).toBe('Never');
    expect(pod.containers).toHaveLength(1);
    expect(pod.containers[0]!.args).toEqual(['migrate']);
    expect(backticked(section(read(contractPath), /^## 8\. CLI/))).toContain('migrate');
    expect(pod.containers[0]!.image).toBe(relayPod.containers[0]!.image);

    // On a first install hooks run before the release's own objects exist: the Job has its own
    // Secret and ServiceAccount, made before it (a lower weight), and reads nothing else of the release.
    const own = 'relay-boxrelay';
    const ownCopy = `${own}-migrate`;
    const hookObject = (kind: string) => objects.find((o) => o.kind === kind && o.metadata.name === ownCopy) as Obj;
    for (const kind of ['Secret', 'ServiceAccount']) {
      expect(hook(hookObject(kind)), kind).toEqual({ ...hook(job), 'helm.sh/hook-weight': '-10' });
    }
    const releaseSecret = objects.find((o) => o.kind === 'Secret' && o.metadata.name === own) as Obj;
    expect(hookObject('Secret').stringData).toEqual(releaseSecret.stringData);
    expect(pod.serviceAccountName).toBe(ownCopy);
    const asRelease = (o: unknown) => JSON.parse(JSON.stringify(o).replaceAll(`"${ownCopy}"`, `"${own}"`)) as unknown;
    expect(containerEnv(objects, 'Job')).toEqual(new Map([...containerEnv(objects)].map(([name, value]) => [name, value.replace(`secret:${own}/`, `secret:${ownCopy}/`)])));
    expect(asRelease(pod.containers[0]!.volumeMounts)).toEqual(relayPod.containers[0]!.volumeMounts);
    expect(asRelease(pod.volumes)).toEqual(relayPod.volumes);
    expect(JSON.stringify(job)).not.toContain(`"${own}"`);

    // The Job's pod is not one of the relay's: no Service sends it requests, the budget does not count it.
    const labels = valueAt(job, 'spec.template.metadata.labels').value as Record<string, string>;
    for (const selector of [...byKind(objects, 'Service'), ...byKind(objects, 'PodDisruptionBudget')].map((o) => (valueAt(o, 'spec.selector').value as Obj).matchLabels ?? valueAt(o, 'spec.selector').value)) {
      expect(Object.entries(selector as Record<string, string>).every(([k, v]) => labels[k] === v)).toBe(false);
    }

    // An existing ServiceAccount is the Job's too; no Job on SQLite (the one replica migrates itself) or when turned off.
    const existing = render({ ...MATRIX['PostgreSQL with replicas']!, serviceAccount: { create: false, name: 'relay-sa' } });
    expect(valueAt(byKind(existing, 'Job')[0], 'spec.template.spec.serviceAccountName').value).toBe('relay-sa');
    expect(byKind(existing, 'ServiceAccount')).toEqual([]);
    expect(byKind(render(MATRIX.defaults!), 'Job')).toEqual([]);
    expect(kinds(render({ ...MATRIX['PostgreSQL with replicas']!, migrationJob: { enabled: false } }))).toEqual(
      kinds(objects.filter((o) => !hook(o)?.['helm.sh/hook'])),
    );
  });

  it('backup.enabled mounts a volume of its own for the relay\'s scheduled backups and sets their variables; refused with PostgreSQL', () => {
    expect(byKind(render(MATRIX.defaults!), 'PersistentVolumeClaim')).toEqual([]);
    expect([...containerEnv(render(MATRIX.defaults!)).keys()].filter((k) => k.startsWith('BOXRELAY_BACKUP_'))).toEqual([]);
    const objects = render(MATRIX['every optional part on']!);
    const [claim] = byKind(objects, 'PersistentVolumeClaim') as Obj[];
    expect(claim).toMatchObject({
      metadata: { name: 'relay-boxrelay-backups', annotations: { 'helm.sh/resource-policy': 'keep', c: 'd' } },
      spec: { accessModes: ['ReadWriteOnce'], storageClassName: 'slow', resources: { requests: { storage: '64Gi' } } },
    });
    const [sts] = byKind(objects, 'StatefulSet') as Obj[];
    const pod = valueAt(sts, 'spec.template.spec').value as { containers: { volumeMounts: Obj[] }[]; volumes: Obj[] };
    expect(pod.volumes).toContainEqual({ name: 'backups', persistentVolumeClaim: { claimName: 'relay-boxrelay-backups' } });
    expect(pod.containers[0]!.volumeMounts).toContainEqual({ name: 'backups', mountPath: '/backups' });
    // Not the database's volume, nor one of its claim template.
    expect(valueAt(sts, 'spec.volumeClaimTemplates').value).toMatchObject([{ metadata: { name: 'data' } }]);
    const env = containerEnv(objects);
    expect(['BOXRELAY_BACKUP_DIR', 'BOXRELAY_BACKUP_INTERVAL', 'BOXRELAY_BACKUP_KEEP'].map((name) => env.get(name))).toEqual(['/backups', '6h', '3']);
    const loaded = loadConfig({ env: Object.fromEntries(containerEnv(render({ backup: MATRIX['every optional part on']!.backup as Obj }))) });
    expect([loaded.backupDir, loaded.backupInterval, loaded.backupKeep]).toEqual(['/backups', 6 * 3_600_000, 3]);
    // The chart's defaults are the relay's.
    const defaults = containerEnv(render({ backup: { enabled: true } }));
    const relay = loadConfig({ env: {} });
    expect([loadConfig({ env: Object.fromEntries(defaults) }).backupInterval, Number(defaults.get('BOXRELAY_BACKUP_KEEP'))]).toEqual([relay.backupInterval, relay.backupKeep]);

    expect(refused(['--set', 'backup.enabled=true', '--set', 'secrets.postgres.url=postgres://relay@db:5432/relay'])).toContain('backup.enabled backs up the SQLite volume');
    expect(refused(['--set', 'backup.interval=30s'])).toMatch(/backup\/interval/);
    expect(refused(['--set', 'backup.keep=0'])).toMatch(/backup\/keep/);
  });

  it('sizes the SQLite volume for the documented average rate kept for the retention window, with one sink', () => {
    const vals = values();
    const bytes = (quantity: string) => Number(/^(\d+)Gi$/.exec(quantity)![1]) * 2 ** 30;
    // 4 events/s (docs/scaling.md), about 500 bytes a delivery and 560 more per sink with attempts recorded (values.yaml).
    const needed = 4 * 86_400 * Number((vals.config as Obj).retentionDays) * (500 + 560);
    expect(read(path.join(repoRoot, 'docs', 'scaling.md'))).toContain('4 events/s');
    expect(bytes(String((vals.persistence as Obj).size))).toBeGreaterThanOrEqual(needed * 1.25);
    // The backups' volume holds keep + 1 copies of a database of that size.
    const backup = vals.backup as Obj;
    expect(bytes(String(backup.size))).toBeGreaterThanOrEqual((Number(backup.keep) + 1) * bytes(String((vals.persistence as Obj).size)));
  });

  it('with a NetworkPolicy, the ServiceMonitor is refused unless Prometheus may reach the internal port', () => {
    const message = refused(['--set', 'networkPolicy.enabled=true', '--set', 'serviceMonitor.enabled=true']);
    expect(message).toContain('networkPolicy.internalFrom');
    expect(message).toContain('--set-json');
    const objects = render(MATRIX['every optional part on']!);
    const [policy] = byKind(objects, 'NetworkPolicy') as Obj[];
    const [monitor] = byKind(objects, 'ServiceMonitor') as Obj[];
    const rules = valueAt(policy, 'spec.ingress').value as { ports: { port: string }[]; from?: unknown[] }[];
    const internal = rules.find((r) => r.ports.some((p) => p.port === 'internal'));
    expect(internal?.from).toEqual((MATRIX['every optional part on']!.networkPolicy as Obj).internalFrom);
    // The ServiceMonitor selects exactly the internal Service, on the port the policy opens.
    const selector = valueAt(monitor, 'spec.selector.matchLabels').value as Record<string, string>;
    const scraped = byKind(objects, 'Service').filter((s) => Object.entries(selector).every(([k, v]) => s.metadata.labels?.[k] === v));
    expect(scraped.map((s) => s.metadata.name)).toEqual(['relay-boxrelay-internal']);
    expect(valueAt(monitor, 'spec.endpoints').value).toMatchObject([{ port: 'internal', path: '/metrics' }]);
  });

  it('ships the Grafana dashboard as a ConfigMap labelled grafana_dashboard: "1", off by default', () => {
    expect(byKind(render(MATRIX.defaults!), 'ConfigMap')).toEqual([]);
    const [map] = byKind(render(MATRIX['every optional part on']!), 'ConfigMap') as (K8sObject & { data: Record<string, string> })[];
    expect(map!.metadata.labels?.grafana_dashboard).toBe('1');
    expect(map!.metadata.namespace).toBe('monitoring');
    const file = read(path.join(chartDir, 'files', 'grafana-dashboard.json'));
    expect(map!.data).toEqual({ 'grafana-dashboard.json': file });
    expect(JSON.parse(map!.data['grafana-dashboard.json']!).title).toBe('boxrelay');
  });

  it('mounts Secrets without subPath (so a rotated secrets file reaches the pod)', () => {
    const objects = render(MATRIX['every optional part on']!);
    const mounts = JSON.stringify(byKind(objects, 'StatefulSet'));
    expect(mounts).toContain('/etc/boxrelay/signing');
    expect(mounts).not.toContain('subPath');
  });

  it('templates reference only values keys that exist in values.yaml', () => {
    const vals = values();
    const missing: string[] = [];
    for (const file of templateFiles()) {
      for (const m of read(file).matchAll(/\.Values((?:\.[A-Za-z_][A-Za-z0-9_]*)+)/g)) {
        const dotted = m[1]!.slice(1);
        if (!valueAt(vals, dotted).found) missing.push(`${path.basename(file)}: .Values.${dotted}`);
      }
    }
    expect(missing).toEqual([]);
  });
});

/** Dockerfile instructions (continuations joined, comments dropped), split into stages. */
function dockerStages(): { instr: string; args: string }[][] {
  const logical: string[] = [];
  let cur = '';
  for (const raw of read(path.join(repoRoot, 'Dockerfile')).split('\n')) {
    const line = raw.trim();
    if (line.startsWith('#') || (line === '' && cur === '')) continue;
    if (line.endsWith('\\')) {
      cur += line.slice(0, -1) + ' ';
      continue;
    }
    logical.push(cur + line);
    cur = '';
  }
  const stages: { instr: string; args: string }[][] = [[]];
  for (const l of logical.filter((x) => x !== '')) {
    const m = /^(\S+)\s*(.*)$/.exec(l)!;
    const ins = { instr: m[1]!.toUpperCase(), args: m[2]!.trim() };
    if (ins.instr === 'FROM') stages.push([]);
    stages[stages.length - 1]!.push(ins);
  }
  return stages;
}

describe('Dockerfile', () => {
  const stages = dockerStages();
  const final = stages[stages.length - 1]!;
  const last = (instr: string) => [...final].reverse().find((i) => i.instr === instr);
  const execForm = (instr: string): string[] => {
    const i = last(instr);
    expect(i, `${instr} in the final stage`).toBeDefined();
    return JSON.parse(i!.args) as string[];
  };
  const workdir = last('WORKDIR')?.args ?? '/';
  const copied = final
    .filter((i) => i.instr === 'COPY')
    .map((i) => path.posix.resolve(workdir, i.args.split(/\s+/).pop()!));

  it('is multi-stage on a Node bookworm-slim image not older than engines.node', () => {
    expect(stages.filter((s) => s.length > 0 && s[0]!.instr === 'FROM').length).toBeGreaterThanOrEqual(2);
    const arg = stages[0]!.find((i) => i.instr === 'ARG' && i.args.startsWith('NODE_IMAGE='));
    const image = arg?.args.split('=')[1] ?? '';
    expect(image).toMatch(/^node:\d+\.\d+\.\d+-bookworm-slim$/);
    expect(semver.satisfies(/^node:([\d.]+)-/.exec(image)![1]!, pkg().engines?.node ?? '')).toBe(true);
  });

  it('the build context (.dockerignore) keeps every file the build script runs', () => {
    const rules = read(path.join(repoRoot, '.dockerignore'))
      .split('\n')
      .map((line) => line.trim())
      .filter((line) => line !== '' && !line.startsWith('#'));
    // The last rule that matches decides; `!` takes a file back.
    const ignored = (file: string) =>
      rules.reduce((out, rule) => {
        const pattern = rule.replace(/^!/, '');
        return path.matchesGlob(file, pattern) || file.startsWith(`${pattern}/`) ? !rule.startsWith('!') : out;
      }, false);
    const run = [...(pkg().scripts?.build ?? '').matchAll(/\bnode\s+([\w./-]+\.m?js)\b/g)].map((m) => m[1]!);
    expect(run).toContain('scripts/console-assets.mjs');
    for (const file of run) expect(ignored(file), file).toBe(false);
    expect(ignored('scripts/image-test.sh')).toBe(true);
  });

  it('ENTRYPOINT runs the package.json bin with node (and its young generation bounded)', () => {
    const [node, ...args] = execForm('ENTRYPOINT');
    const script = args.pop();
    expect(node).toBe('node');
    expect(args).toEqual(['--max-semi-space-size=4']);
    expect(path.posix.normalize(script!)).toBe(path.posix.normalize(pkg().bin.boxrelay!));
    expect(fs.existsSync(path.join(repoRoot, script!))).toBe(true);
    // The bin is copied where the entrypoint looks for it.
    expect(copied).toContain(path.posix.resolve(workdir, path.posix.dirname(script!)));
  });

  it('what the bin imports is copied into the image', () => {
    const bin = pkg().bin.boxrelay!;
    const imports = [...read(path.join(repoRoot, bin)).matchAll(/import(?:\s+(?:[^'"]*from\s+)?|\()['"](\.[^'"]+)['"]/g)];
    expect(imports.length).toBeGreaterThan(0);
    for (const m of imports) {
      const target = path.posix.resolve(workdir, path.posix.dirname(bin), m[1]!);
      expect(copied.some((c) => target === c || target.startsWith(c + '/')), target).toBe(true);
    }
    for (const p of ['package.json', 'node_modules', 'dist', 'bin']) {
      expect(copied).toContain(path.posix.resolve(workdir, p));
    }
  });

  it('runs the commands docs/deployment.md documents', () => {
    const deployment = read(path.join(repoRoot, 'docs', 'deployment.md'));
    expect(deployment).toContain(`\`ENTRYPOINT ${JSON.stringify(execForm('ENTRYPOINT'))}\``);
    expect(deployment).toContain(`\`CMD ${JSON.stringify(execForm('CMD'))}\``);
    expect(deployment).toContain('docker build -t boxrelay .');
    for (const port of (last('EXPOSE')?.args ?? '').split(/\s+/)) expect(deployment).toContain(`${port}:${port}`);
  });

  it('CMD is `serve`, a contract CLI verb, and the chart passes the same args', () => {
    const cmd = execForm('CMD');
    expect(cmd).toEqual(['serve']);
    const cli = section(read(contractPath), /^## 8\. CLI/);
    expect(backticked(cli)).toContain('serve');
    expect(read(path.join(chartDir, 'templates', '_pod.tpl'))).toContain('args: ["serve"]');
  });

  it('exposes the contract default ports, keeps the database on /data, runs as non-root', () => {
    const contract = contractVariables();
    const exposed = (last('EXPOSE')?.args ?? '').split(/\s+/);
    expect(exposed).toContain(contract.get('PORT'));
    expect(exposed).toContain(contract.get('BOXRELAY_INTERNAL_PORT'));
    expect(last('VOLUME')?.args).toBe('/data');
    expect(final.filter((i) => i.instr === 'ENV').map((i) => i.args).join(' ')).toMatch(
      /BOXRELAY_DATABASE=\/data\/boxrelay\.db/,
    );
    const user = last('USER')?.args ?? 'root';
    expect(user.split(':')[0]).not.toMatch(/^(root|0)$/);
    expect(last('STOPSIGNAL')?.args).toBe('SIGTERM');
    expect(last('HEALTHCHECK')?.args).toMatch(/\/healthz/);
  });
});
