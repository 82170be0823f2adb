import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { configDescriptions } from '../src/config/descriptions.js';
import {
  cliVerbs,
  configKeysWithoutDescription,
  configVariableNames,
  contractNames,
  referencePages,
  relayMetrics,
} from '../src/docs/references.js';

const repoRoot = join(import.meta.dirname, '..');
const contract = readFileSync(join(repoRoot, 'docs', 'relay-contract.md'), 'utf8');

describe('generated references (npm run docs)', () => {
  it('are the pages the code writes now, word for word', async () => {
    for (const [path, text] of Object.entries(await referencePages())) {
      expect(readFileSync(join(repoRoot, path), 'utf8'), `${path} is stale: run npm run docs`).toBe(text);
    }
  });

  it('give every setting of the schema a meaning (src/config/descriptions.ts)', () => {
    expect(configKeysWithoutDescription()).toEqual([]);
  });

  it('say which thread the busy timeout holds: the storage thread, the event loop only inline (test/storage-thread.test.ts shows /healthz answering meanwhile)', () => {
    expect(configDescriptions.busyTimeoutMs).toContain('the storage thread');
    expect(configDescriptions.busyTimeoutMs).toContain('with `BOXRELAY_FANOUT_THREAD=inline`, the event loop');
  });

  it('write a duration default as a user gives it, and list every variable with its default', () => {
    const page = readFileSync(join(repoRoot, 'docs/reference/configuration.md'), 'utf8');
    expect(page).toContain('| `BOXRELAY_UNSERVED_SINK_GRACE` | `unservedSinkGrace` | `10m` |');
    expect(page).toContain('| `BOXRELAY_TOLERANCE_SECONDS` | `toleranceSeconds` | `300` |');
    expect(page).toContain('| `PORT` | `port` | `8080` |');
  });
});

describe('the contract (docs/relay-contract.md) against the references', () => {
  const named = contractNames(contract);

  it('names no configuration variable the configuration reference lacks', () => {
    const listed = new Set(configVariableNames());
    expect(named.variables.filter((name) => !listed.has(name)), 'variables the contract names and the reference lacks').toEqual([]);
  });

  it('names no metric the metrics reference lacks', async () => {
    const listed = new Set((await relayMetrics()).map(({ name }) => name.replace(/^boxrelay_/, '')));
    expect(named.metrics.filter((name) => !listed.has(name)), 'metrics the contract names and the registry lacks').toEqual([]);
  });

  it('names no CLI verb the CLI reference lacks', () => {
    const listed = new Set(cliVerbs());
    expect(named.verbs.filter((verb) => !listed.has(verb)), 'CLI verbs the contract names and the CLI lacks').toEqual([]);
  });
});

describe('the docs against the code', () => {
  /** Variables of the tests, CI and the image build, which the relay itself never reads. */
  const TOOLING = new Set(['BOXRELAY_TEST_POSTGRES_URL', 'BOXRELAY_SHARED_CONTRACT', 'BOXRELAY_IMAGE_MAX_MB', 'BOXRELAY_IMAGE_STORAGE_DRIVER', 'BOXRELAY_IMAGE_CACHE']);
  const pages = ['README.md', 'CONTRIBUTING.md', ...readdirSync(join(repoRoot, 'docs')).filter((f) => f.endsWith('.md') && f !== 'relay-contract.md').map((f) => `docs/${f}`)];

  it('name no variable or metric the code does not have (a renamed or removed one is caught)', async () => {
    const variables = new Set([...configVariableNames(), ...TOOLING]);
    const metrics = new Set((await relayMetrics()).map(({ name }) => name));
    const unknown = pages.flatMap((page) => {
      const text = readFileSync(join(repoRoot, page), 'utf8');
      const names = [
        ...(text.match(/\bBOXRELAY_[A-Z0-9_]*[A-Z0-9]\b/g) ?? []).filter((name) => !variables.has(name)),
        ...(text.match(/\bboxrelay_[a-z0-9_]*[a-z0-9]\b/g) ?? []).filter((name) => !metrics.has(name.replace(/_(bucket|sum|count)$/, ''))),
      ];
      return [...new Set(names)].map((name) => `${page}: ${name}`);
    });
    expect(unknown).toEqual([]);
  });
});

describe('reading names out of a contract', () => {
  it('finds variables, metrics with and without labels or prefix, and verbs with alternatives', () => {
    const text = [
      '| `BOXRELAY_NATS_URL` | none | … set `BOXRELAY_` variables |',
      'Metric names (prefix `boxrelay_`): `webhook_requests_total{outcome}` (outcome = `accepted`,',
      '`duplicate`), `ready` (1 when ready), `boxes{state}`, `event_delay_seconds`.',
      '',
      'Adds to `boxrelay_filter_errors_total{sink}`; `boxrelay upstream register|rotate`, `boxrelay backup <file>`,',
      '`boxrelay store copy --to <postgres url>`.',
      '',
      '## 8. CLI (`boxrelay`, the package\'s bin)',
      '',
      '`serve` (migrates), `send-test` (`--url --secret`), `dead-letters list|retry`, `replay --since`.',
      '',
      '## 9. Next',
      '',
      '`other` is no verb outside the CLI section.',
    ].join('\n');
    expect(contractNames(text)).toEqual({
      variables: ['BOXRELAY_NATS_URL'],
      metrics: ['boxes', 'event_delay_seconds', 'filter_errors_total', 'ready', 'webhook_requests_total'],
      verbs: ['backup', 'dead-letters list', 'dead-letters retry', 'replay', 'send-test', 'serve', 'store copy', 'upstream register', 'upstream rotate'],
    });
  });

  it('reports what a contract names and the code lacks', () => {
    const named = contractNames('`BOXRELAY_NOT_A_SETTING`, `boxrelay_not_a_metric_total{sink}`, `boxrelay not-a-verb`');
    expect(named.variables.filter((name) => !configVariableNames().includes(name))).toEqual(['BOXRELAY_NOT_A_SETTING']);
    expect(named.metrics).toEqual(['not_a_metric_total']);
    expect(named.verbs.filter((verb) => !cliVerbs().includes(verb))).toEqual(['not-a-verb']);
  });
});
