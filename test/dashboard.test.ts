// The Grafana dashboard (helm/boxrelay/files/grafana-dashboard.json): every query parses (promtool
// check rules, each expression as a recording rule) and names only metrics that a real relay's
// /metrics exposes, reconciliation configured so that its metrics exist. promtool is required.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import request from 'supertest';
import { describe, expect, it } from 'vitest';
import YAML from 'yaml';
import { BUS_NAMES } from '../src/config/schema.js';
import { BUSES } from '../src/sinks/buses.js';
import { SHARED_AMQP, SHARED_MQTT, SHARED_REDIS, uniqueName } from './support/buses.js';
import { fanoutFixture, hook } from './support/fanout-relay.js';
import { SHARED_NATS } from './support/nats.js';
import { startFakeSandbox } from './support/fake-sandbox.js';
import { parseExposition } from './support/prometheus.js';
import { SECRET } from './support/sign.js';

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const DASHBOARD = path.join(repoRoot, 'helm', 'boxrelay', 'files', 'grafana-dashboard.json');
const PROMTOOL = process.env.PROMTOOL || 'promtool';

interface Panel {
  type: string;
  title: string;
  panels?: Panel[];
  targets?: { expr: string }[];
}
const dashboard = JSON.parse(fs.readFileSync(DASHBOARD, 'utf8')) as {
  panels: Panel[];
  templating: { list: { name: string; query?: { query: string } }[] };
};
const panels = dashboard.panels.flatMap((p) => [p, ...(p.panels ?? [])]).filter((p) => p.type !== 'row');
const queries = panels.flatMap((p) => (p.targets ?? []).map((t) => ({ panel: p.title, expr: t.expr })));

/** Grafana's own variables, replaced as Grafana does before the query reaches Prometheus. */
const asPromQL = (expr: string): string =>
  expr.replaceAll('$__rate_interval', '5m').replaceAll('$__interval', '1m').replaceAll('$__range', '1h').replaceAll('$job', '.+').replaceAll('$account', '.+');

/**
 * The metric names of a PromQL expression: identifiers left after dropping strings, label matchers,
 * ranges, grouping clauses, function calls, keywords and numbers.
 */
function metricNames(expr: string): string[] {
  const bare = expr
    .replace(/"(?:[^"\\]|\\.)*"/g, '')
    .replace(/\{[^}]*\}/g, '')
    .replace(/\[[^\]]*\]/g, '')
    .replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, '');
  const keywords = new Set(['and', 'or', 'unless', 'bool', 'offset', 'by', 'without']);
  return [...bare.matchAll(/\b([a-zA-Z_:][a-zA-Z0-9_:]*)\b(?!\s*\()/g)].map((m) => m[1]!).filter((n) => !keywords.has(n));
}

describe('Grafana dashboard', () => {
  const { defer, relay } = fanoutFixture();

  it('has the panels operators need', () => {
    const titles = panels.map((p) => p.title);
    for (const title of [
      'Deliveries by outcome',
      'Event delay',
      'Fan-out by sink and outcome',
      'Outbox pending',
      'Dead letters',
      'Boxes by state',
      'Secrets and expiry',
      'Readiness',
      'Sinks up and paused',
      'Reconciliation: time since the last success',
    ]) {
      expect(titles).toContain(title);
    }
    for (const p of panels) expect(p.targets?.length, `${p.title} has a query`).toBeGreaterThan(0);
  });

  it('every query parses (promtool)', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'boxrelay-dashboard-'));
    defer(async () => fs.rmSync(dir, { recursive: true, force: true }));
    const file = path.join(dir, 'dashboard.rules.yml');
    const rules = queries.map((q, i) => ({ record: `dashboard:query_${i}`, expr: asPromQL(q.expr) }));
    fs.writeFileSync(file, YAML.stringify({ groups: [{ name: 'dashboard', rules }] }));
    const r = spawnSync(PROMTOOL, ['check', 'rules', file], { encoding: 'utf8', timeout: 60_000 });
    if (r.error) throw new Error(`cannot run promtool (${PROMTOOL}): ${r.error.message}; install Debian's prometheus package or set PROMTOOL`);
    expect(`${r.stdout}${r.stderr}`).toContain(`SUCCESS: ${rules.length} rules found`);
    expect(r.status, r.stderr).toBe(0);
  });

  it('filters every panel on the series with an account label by the account variable (contract section 21)', () => {
    const variable = dashboard.templating.list.find((v) => v.name === 'account')?.query?.query;
    expect(variable).toBe('label_values(boxrelay_webhook_requests_total{job=~"$job"}, account)');
    const labelled = queries.filter((q) => /boxrelay_(webhook_requests_total|events_total|secrets_valid|secret_expiry_timestamp_seconds|signature_secret_matches_total)\b/.test(q.expr));
    expect(labelled.map((q) => q.panel)).toEqual([
      'Deliveries by outcome',
      'Unique events by type',
      'Unique events by account',
      'Refused deliveries by account',
      'Secrets and expiry',
      'Secrets and expiry',
      'Signature matches by secret slot',
    ]);
    for (const q of labelled) expect(q.expr, q.panel).toMatch(/\{job=~"\$job", account=~"\$account"[,}]/);
  });

  it('every query, and the job and account variables, names only metrics a relay exposes', async () => {
    const upstream = await startFakeSandbox();
    defer(() => upstream.close());
    // A secret with an expiry (only the secrets file gives one), so the expiry gauge has a sample.
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'boxrelay-dashboard-'));
    defer(async () => fs.rmSync(dir, { recursive: true, force: true }));
    const secretsFile = path.join(dir, 'secrets');
    fs.writeFileSync(secretsFile, 'whsec_b2xkLXNlY3JldC0wMTIzNDU2Nzg5YWJjZGVm 2099-01-01T00:00:00Z\n');
    const t = await relay({
      secrets: [SECRET],
      secretsFile,
      upstreamBaseUrl: upstream.baseUrl,
      upstreamApiKey: upstream.apiKey,
      reconcileInterval: '0',
      hooks: [hook('alerts', 'http://127.0.0.1:9/hook')],
    });
    const scraped = parseExposition((await request(t.relay.internalApp).get('/metrics').expect(200)).text);
    const exposed = new Set<string>();
    for (const [family, type] of scraped.types) {
      exposed.add(family);
      if (type === 'histogram') for (const suffix of ['_bucket', '_sum', '_count']) exposed.add(family + suffix);
    }
    // Present with samples, not only declared: the expiry gauge needs the secret with an expiry.
    expect(scraped.samples.some((s) => s.name === 'boxrelay_secret_expiry_timestamp_seconds')).toBe(true);
    expect(exposed.has('boxrelay_reconcile_last_success_timestamp_seconds')).toBe(true);

    const variables = ['job', 'account'].map((name) => ({ panel: `${name} variable`, expr: /label_values\((\w+)/.exec(dashboard.templating.list.find((v) => v.name === name)!.query!.query)![1]! }));
    const named = [...queries, ...variables];
    for (const q of named) {
      const names = metricNames(asPromQL(q.expr));
      expect(names.length, `${q.panel}: ${q.expr}`).toBeGreaterThan(0);
      for (const name of names) expect(exposed.has(name), `${q.panel}: ${name} is not exposed`).toBe(true);
    }
  });

  it('has bus panels whose queries take every bus sink name a relay with all buses exposes', async () => {
    expect(BUSES.map((bus) => bus.name)).toEqual([...BUS_NAMES]);
    const busPanels = panels.filter((p) => p.title.startsWith('Buses: '));
    expect(busPanels.map((p) => p.title)).toEqual([
      'Buses: publishes by bus and outcome',
      'Buses: publish latency (p95)',
      'Buses: up, paused and pending',
      'Buses: dead letters',
    ]);
    const name = uniqueName();
    const t = await relay({
      natsUrl: SHARED_NATS,
      amqpUrl: SHARED_AMQP,
      amqpExchange: name,
      redisUrl: SHARED_REDIS,
      redisStream: name,
      mqttUrl: SHARED_MQTT,
      kafkaBrokers: '127.0.0.1:9',
      // Nothing listens there: the AWS sinks are exposed (down) all the same.
      awsEndpoint: 'http://127.0.0.1:9',
      awsRegion: 'us-east-1',
      sqsQueueUrl: 'http://127.0.0.1:9/000000000000/events',
      snsTopicArn: 'arn:aws:sns:us-east-1:000000000000:events',
      s3Archive: 's3://events/boxrelay',
    });
    const scraped = parseExposition((await request(t.relay.internalApp).get('/metrics').expect(200)).text);
    const exposedSinks = new Set(scraped.samples.filter((s) => s.name === 'boxrelay_sink_up').map((s) => s.labels.sink));
    expect(exposedSinks).toEqual(new Set(BUS_NAMES));
    for (const target of busPanels.flatMap((p) => p.targets ?? [])) {
      const matcher = /sink=~"([^"]+)"/.exec(target.expr)?.[1];
      expect(matcher, target.expr).toBeDefined();
      for (const bus of BUS_NAMES) expect(new RegExp(`^(?:${matcher})$`).test(bus), `${bus} in ${target.expr}`).toBe(true);
    }
  });
});
