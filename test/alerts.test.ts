// The Prometheus alert rules (helm/boxrelay/files/alerts.rules.yml) checked and unit-tested with
// promtool (test/alerts.rules.test.yml). promtool is required: without it these tests FAIL.
// Debian/Ubuntu: `apt-get install prometheus` provides /usr/bin/promtool; or set PROMTOOL=/path.
import { describe, it, expect } from 'vitest';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import YAML from 'yaml';

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const RULES = 'helm/boxrelay/files/alerts.rules.yml';
const RULE_TESTS = 'test/alerts.rules.test.yml';
const contract = fs.readFileSync(path.join(repoRoot, 'docs', 'relay-contract.md'), 'utf8');
/** The metrics the relay serves beyond the contract are documented there, generated from the registry. */
const metricsReference = fs.readFileSync(path.join(repoRoot, 'docs', 'reference', 'metrics.md'), 'utf8');
const PROMTOOL = process.env.PROMTOOL || 'promtool';

/** Alerts this rule file must define (see docs/deployment.md, "Alert rules"). */
const EXPECTED_ALERTS = [
  'BoxRelayBoxError',
  'BoxRelayDeadLetters',
  'BoxRelayOutboxBacklogGrowing',
  'BoxRelayLogHeldBack',
  'BoxRelaySignatureFailures',
  'BoxRelayDeliveriesAllRefused',
  'BoxRelayNoValidSecret',
  'BoxRelaySecretExpiringSoon',
  'BoxRelayNotReady',
  'BoxRelaySinkDown',
  'BoxRelayReconcileFailing',
  'BoxRelayHookPaused',
  'BoxRelaySinkFailing',
  'BoxRelayStorageFillingUp',
  'BoxRelayStorageLow',
];

function promtool(args: string[]): { status: number | null; output: string } {
  const r = spawnSync(PROMTOOL, args, { cwd: repoRoot, encoding: 'utf8', timeout: 120_000 });
  if (r.error) {
    throw new Error(
      `cannot run promtool (${PROMTOOL}): ${r.error.message}. ` +
        'Install it (Debian/Ubuntu: apt-get install prometheus) or set PROMTOOL=/path/to/promtool; ' +
        'the alert rule tests do not skip without it.',
    );
  }
  return { status: r.status, output: `${r.stdout}${r.stderr}` };
}

interface Rule {
  alert?: string;
  record?: string;
  expr: string;
  for?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}
interface AlertTest {
  eval_time: string;
  alertname: string;
  exp_alerts?: unknown[] | null;
}
interface TestGroup {
  alert_rule_test?: AlertTest[];
}

const rulesDoc = YAML.parse(fs.readFileSync(path.join(repoRoot, RULES), 'utf8')) as {
  groups: { name: string; rules: Rule[] }[];
};
const rules = rulesDoc.groups.flatMap((g) => g.rules);
const testsDoc = YAML.parse(fs.readFileSync(path.join(repoRoot, RULE_TESTS), 'utf8')) as {
  rule_files: string[];
  tests: TestGroup[];
};

/** Prometheus duration ("90s", "5m", "1h30m", "2d") in seconds. */
function seconds(d: string): number {
  const units: Record<string, number> = { ms: 0.001, s: 1, m: 60, h: 3600, d: 86400, w: 604800, y: 31536000 };
  const parts = [...d.matchAll(/(\d+)(ms|s|m|h|d|w|y)/g)];
  if (parts.length === 0 || parts.map((p) => p[0]).join('') !== d) throw new Error(`bad duration ${d}`);
  return parts.reduce((sum, p) => sum + Number(p[1]) * units[p[2]!]!, 0);
}

describe('alert rules (promtool)', () => {
  it('promtool check rules accepts the rule file', () => {
    const { status, output } = promtool(['check', 'rules', RULES]);
    expect(output).toContain(`SUCCESS: ${rules.length} rules found`);
    expect(status, output).toBe(0);
  });

  it('promtool test rules passes every unit test', () => {
    const { status, output } = promtool(['test', 'rules', RULE_TESTS]);
    expect(output).not.toContain('FAILED');
    expect(output).toMatch(/SUCCESS/);
    expect(status, output).toBe(0);
  });
});

describe('alert rules (structure)', () => {
  it('define exactly the expected alerts, each with a severity, summary and description', () => {
    expect(rules.map((r) => r.alert).sort()).toEqual([...EXPECTED_ALERTS].sort());
    for (const r of rules) {
      expect(['critical', 'warning', 'info'], `${r.alert} severity`).toContain(r.labels?.severity);
      expect(r.annotations?.summary, `${r.alert} summary`).toBeTruthy();
      expect(r.annotations?.description, `${r.alert} description`).toBeTruthy();
    }
  });

  it('use only metric names of the contract or the metrics reference, and outcomes of the contract', () => {
    for (const r of rules) {
      for (const m of r.expr.matchAll(/\bboxrelay_([a-z_]+)/g)) {
        const name = m[1]!;
        const listed = contract.includes(`\`${name}\``) || contract.includes(`\`${name}{`) || metricsReference.includes(`\`boxrelay_${name}\``);
        expect(listed, `${r.alert}: boxrelay_${name} is neither a contract metric nor in the metrics reference`).toBe(true);
      }
      for (const m of r.expr.matchAll(/outcome=~?"([^"]+)"/g)) {
        for (const outcome of m[1]!.split('|')) {
          expect(contract, `${r.alert}: outcome ${outcome}`).toContain(`\`${outcome}\``);
        }
      }
    }
  });

  it('the unit tests load the rule file', () => {
    const loaded = testsDoc.rule_files.map((f) => path.resolve(repoRoot, 'test', f));
    expect(loaded).toContain(path.join(repoRoot, RULES));
  });

  it.each(EXPECTED_ALERTS)('%s is tested firing, then cleared later in the same series', (alert) => {
    const proven = testsDoc.tests.some((group) => {
      const cases = (group.alert_rule_test ?? []).filter((c) => c.alertname === alert);
      const firing = cases.filter((c) => (c.exp_alerts ?? []).length > 0).map((c) => seconds(c.eval_time));
      const quiet = cases.filter((c) => (c.exp_alerts ?? []).length === 0).map((c) => seconds(c.eval_time));
      return firing.some((f) => quiet.some((q) => q > f));
    });
    expect(proven, `${RULE_TESTS} must show ${alert} firing and then resolved`).toBe(true);
  });
});
