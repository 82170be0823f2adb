// Static checks of the deployment files: the Helm chart (helm/boxrelay) and the Dockerfile,
// against the relay contract (docs/relay-contract.md) and package.json.
// No helm or docker binary is needed: plain YAML is parsed, templates are scanned as text.
import { describe, it, expect } from 'vitest';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { configKeys, envNameOf } from '../src/config/schema.js';
import YAML from 'yaml';

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
  BOXRELAY_ADMIN_TOKEN: 'secrets.adminToken',
  // postgres:// URL from a Secret; else /data/boxrelay.db on the StatefulSet's volume.
  BOXRELAY_DATABASE: 'secrets.postgres',
  BOXRELAY_NATS_CREDS_FILE: 'secrets.nats',
  BOXRELAY_NATS_TOKEN: 'secrets.nats',
  BOXRELAY_NATS_USER: 'secrets.nats',
  BOXRELAY_NATS_PASSWORD: 'secrets.nats',
  BOXRELAY_UPSTREAM_API_KEY: 'secrets.upstreamApiKey',
  // boxrelay's own setting (README, "Settings boxrelay adds to the contract").
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
const allTemplates = (): string => templateFiles().map(read).join('\n');

const values = (): Obj => parseYaml(path.join(chartDir, 'values.yaml')) as Obj;
const pkg = (): { version: string; bin: Record<string, string>; engines?: { node?: string } } =>
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

  it('every config key maps to a listed non-secret variable', () => {
    const nonSecret = new Set([...contract.keys()].filter((v) => !(v in SECRET_VARS)));
    const byKey = new Map([...nonSecret].map((v) => [keyOf(v), v]));
    for (const key of Object.keys(config)) {
      expect(byKey.has(key), `config.${key} is not a contract variable`).toBe(true);
    }
  });

  it('every non-secret contract variable has a config key', () => {
    for (const v of contract.keys()) {
      if (v in SECRET_VARS) continue;
      expect(Object.keys(config), `${v} has no config.${keyOf(v)}`).toContain(keyOf(v));
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

  it('the templates render each config key as its contract variable, once', () => {
    const pairs = [
      ...allTemplates().matchAll(/\(dict "name" "([A-Z0-9_]+)" "value" \.Values\.config\.([A-Za-z0-9]+)\)/g),
    ].map((m) => [m[1]!, m[2]!] as const);
    for (const [envName, key] of pairs) expect(keyOf(envName), `${envName} <- config.${key}`).toBe(key);
    expect(pairs.map(([, key]) => key).sort()).toEqual(Object.keys(config).sort());
  });

  it('the templates set the secret-managed variables (and not BOXRELAY_SECRETS)', () => {
    const text = allTemplates();
    for (const [envName, valuesPath] of Object.entries(SECRET_VARS)) {
      const rendered = new RegExp(`(name: |"name" ")${envName}\\b`).test(text);
      expect(rendered, envName).toBe(valuesPath !== null);
    }
  });
});

describe('chart: templates', () => {
  const files = templateFiles();

  it('reference only values keys that exist in values.yaml', () => {
    const vals = values();
    const missing: string[] = [];
    for (const file of files) {
      for (const m of read(file).matchAll(/\.Values((?:\.[A-Za-z_][A-Za-z0-9_]*)+)/g)) {
        const dotted = m[1]!.slice(1);
        if (!valueAt(vals, dotted).found) missing.push(`${path.basename(file)}: .Values.${dotted}`);
      }
    }
    expect(missing).toEqual([]);
  });

  it('include only templates that are defined', () => {
    const text = allTemplates();
    const defined = new Set([...text.matchAll(/\{\{-?\s*define "([^"]+)"/g)].map((m) => m[1]));
    const included = new Set([...text.matchAll(/include "([^"]+)"/g)].map((m) => m[1]!));
    for (const name of included) expect(defined.has(name), `include "${name}"`).toBe(true);
  });

  it.each(files.map((f) => [path.basename(f), f]))('%s: block actions are balanced', (_name, file) => {
    const text = read(file);
    const opened = [...text.matchAll(/\{\{-?\s*(if|with|range|define)\b/g)].length;
    const closed = [...text.matchAll(/\{\{-?\s*end\s*-?\}\}/g)].length;
    expect(closed).toBe(opened);
  });

  it('.Files.Get reads files that exist', () => {
    const got = [...allTemplates().matchAll(/\.Files\.Get "([^"]+)"/g)].map((m) => m[1]!);
    expect(got).toContain('files/alerts.rules.yml');
    for (const f of got) expect(fs.existsSync(path.join(chartDir, f)), f).toBe(true);
  });

  it('keep SQLite to one replica on a ReadWriteOnce volume, and fail on more without PostgreSQL', () => {
    const sts = read(path.join(chartDir, 'templates', 'statefulset.yaml'));
    expect(sts).toMatch(/^\s*replicas: 1$/m);
    expect(sts).toMatch(/volumeClaimTemplates:/);
    expect(sts).toMatch(/- ReadWriteOnce/);
    expect(sts).not.toMatch(/ReadWriteMany/);
    const helpers = read(path.join(chartDir, 'templates', '_helpers.tpl'));
    expect(helpers).toMatch(/gt \(int \.Values\.replicaCount\) 1\) \}\}\s*\{\{- fail "replicaCount > 1 needs PostgreSQL/);
    expect(read(path.join(chartDir, 'templates', 'deployment.yaml'))).toMatch(/replicas: \{\{ int \.Values\.replicaCount \}\}/);
  });

  it('mount Secrets without subPath (so a rotated secrets file reaches the pod)', () => {
    expect(allTemplates()).not.toMatch(/^\s*subPath:/m);
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
    expect(image).toMatch(/^node:\d+-bookworm-slim$/);
    const minNode = Number(/\d+/.exec(pkg().engines?.node ?? '0')![0]);
    expect(Number(/\d+/.exec(image)![0])).toBeGreaterThanOrEqual(minNode);
  });

  it('ENTRYPOINT runs the package.json bin with node', () => {
    const [node, script, ...rest] = execForm('ENTRYPOINT');
    expect(node).toBe('node');
    expect(rest).toEqual([]);
    expect(path.posix.normalize(script!)).toBe(path.posix.normalize(pkg().bin.boxrelay!));
    expect(fs.existsSync(path.join(repoRoot, script!))).toBe(true);
    // The bin is copied where the entrypoint looks for it.
    expect(copied).toContain(path.posix.resolve(workdir, path.posix.dirname(script!)));
  });

  it('what the bin imports is copied into the image', () => {
    const bin = pkg().bin.boxrelay!;
    const imports = [...read(path.join(repoRoot, bin)).matchAll(/import\s+(?:[^'"]*from\s+)?['"](\.[^'"]+)['"]/g)];
    expect(imports.length).toBeGreaterThan(0);
    for (const m of imports) {
      const target = path.posix.resolve(workdir, path.posix.dirname(bin), m[1]!);
      expect(copied.some((c) => target === c || target.startsWith(c + '/')), target).toBe(true);
    }
    for (const p of ['package.json', 'node_modules', 'dist', 'bin']) {
      expect(copied).toContain(path.posix.resolve(workdir, p));
    }
  });

  it('runs the commands the README documents', () => {
    const readme = read(path.join(repoRoot, 'README.md'));
    expect(readme).toContain(`\`ENTRYPOINT ${JSON.stringify(execForm('ENTRYPOINT'))}\``);
    expect(readme).toContain(`\`CMD ${JSON.stringify(execForm('CMD'))}\``);
    expect(readme).toContain('docker build -t boxrelay .');
    for (const port of (last('EXPOSE')?.args ?? '').split(/\s+/)) expect(readme).toContain(`${port}:${port}`);
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
