import { writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { loadConfig } from '../src/config/load.js';
import { redactConfig } from '../src/config/redact.js';
import { sqliteFile } from './support/databases.js';
import { requireBuild, runCli } from './support/process.js';
import { files, problemsOf } from './support/config-files.js';

const PROD = 'whsec_cHJvZC1zZWNyZXQtYWNjb3VudHMtMDEyMzQ1';
const STAGING = 'whsec_c3RhZ2luZy1zZWNyZXQtYWNjb3VudHMtMDEy';
const DEFAULT = 'whsec_ZGVmYXVsdC1zZWNyZXQtYWNjb3VudHMtMDEy';

const withAccounts = (yaml: string, more: Record<string, string> = {}, env: Record<string, string> = {}) => () =>
  loadConfig({ env: { BOXRELAY_ACCOUNTS_FILE: '/accounts.yaml', ...env }, readFile: files({ '/accounts.yaml': yaml, ...more }) });

describe('accounts (contract section 21): configuration', () => {
  it('has none beside default unless configured', () => {
    expect(loadConfig({ env: {} }).accounts).toEqual([]);
  });

  it('reads BOXRELAY_ACCOUNTS_FILE, and accounts in the config file, leaving unset what has a default elsewhere', () => {
    const yaml = [
      '- name: prod',
      `  secrets: [${PROD}]`,
      '  upstreamBaseUrl: https://api.sandbox.example/v1',
      '  upstreamApiKey: sk_prod',
      '  cloudEventsSource: sandbox/prod',
      '  natsSubjectPrefix: sandbox-prod',
      '- name: staging-2',
      '  secretsFile: /staging-secrets',
      '',
    ].join('\n');
    const config = withAccounts(yaml, { '/staging-secrets': `${STAGING}\n` })();
    expect(config.accounts).toEqual([
      { name: 'prod', secrets: [PROD], upstreamBaseUrl: 'https://api.sandbox.example/v1', upstreamApiKey: 'sk_prod', cloudEventsSource: 'sandbox/prod', natsSubjectPrefix: 'sandbox-prod' },
      { name: 'staging-2', secrets: [], secretsFile: '/staging-secrets' },
    ]);
    const inline = loadConfig({
      env: { BOXRELAY_CONFIG: '/c.yaml' },
      readFile: files({ '/c.yaml': `accounts:\n  - name: prod\n    secrets: ${PROD}\n` }),
    });
    expect(inline.accounts).toEqual([{ name: 'prod', secrets: [PROD] }]);
  });

  it('exits with one line per problem: invalid, reserved and duplicate names, no secret, unknown keys', () => {
    const problems = problemsOf(
      withAccounts(
        [
          `- {name: Prod, secrets: [${PROD}]}`,
          `- {name: default, secrets: [${STAGING}]}`,
          '- {name: staging}',
          `- {name: dup, secrets: [whsec_a]}`,
          `- {name: dup, secrets: [whsec_b]}`,
          `- {name: -x, secrets: [whsec_c]}`,
          `- {name: ${'a'.repeat(64)}, secrets: [whsec_d]}`,
          `- {name: extra, secrets: [whsec_e], upstreamApiKey: sk_only, colour: blue}`,
          '',
        ].join('\n'),
      ),
    );
    expect(problems).toEqual([
      'accounts file: accounts.0.name: an account name is a-z or 0-9, then up to 62 of a-z, 0-9 and -',
      'accounts file: accounts.1.name: default is the account of BOXRELAY_SECRETS and is reserved',
      'accounts file: accounts.5.name: an account name is a-z or 0-9, then up to 62 of a-z, 0-9 and -',
      'accounts file: accounts.6.name: an account name is a-z or 0-9, then up to 62 of a-z, 0-9 and -',
      'accounts file: accounts.7: unknown setting(s) colour',
      'accounts file: accounts.2.secrets: account staging: no signing secret (give secrets or secretsFile)',
      'accounts file: accounts.4.name: account dup: the name is given to two accounts',
      'accounts file: accounts.7.upstreamApiKey: account extra: upstreamBaseUrl and upstreamApiKey go together',
    ]);
  });

  it('refuses one secret given to two accounts, default included and through secrets files, never showing it', () => {
    const problems = problemsOf(
      withAccounts(
        `- {name: prod, secrets: [${PROD}]}\n- {name: staging, secretsFile: /staging}\n- {name: qa, secrets: [${DEFAULT}, ${PROD}]}\n`,
        { '/staging': `# rotated\n${PROD} 2030-01-01T00:00:00Z\n`, '/default': `${DEFAULT}\n` },
        { BOXRELAY_SECRETS_FILE: '/default' },
      ),
    );
    expect(problems).toEqual([
      'accounts prod and staging: one signing secret is given to both (each account needs its own; the secret is not shown)',
      'accounts default and qa: one signing secret is given to both (each account needs its own; the secret is not shown)',
      'accounts prod and qa: one signing secret is given to both (each account needs its own; the secret is not shown)',
    ]);
    expect(problems.join('\n')).not.toMatch(/whsec_/);
    expect(problemsOf(withAccounts(`- {name: prod, secrets: [${DEFAULT}]}\n`, {}, { BOXRELAY_SECRETS: DEFAULT }))).toEqual([
      'accounts default and prod: one signing secret is given to both (each account needs its own; the secret is not shown)',
    ]);
  });

  it('refuses an account secrets file that does not read, naming the file and line only', () => {
    expect(problemsOf(withAccounts('- {name: prod, secretsFile: /missing}\n'))).toEqual(['accounts.0.secretsFile (/missing): cannot read (ENOENT)']);
    expect(problemsOf(withAccounts('- {name: prod, secretsFile: /bad}\n', { '/bad': `${PROD} tomorrow\n` }))).toEqual([
      'accounts.0.secretsFile (/bad): line 1: expiry is not an ISO-8601 time with a zone',
    ]);
  });

  it('refuses the file and the inline list together, an unreadable file, and BOXRELAY_ACCOUNTS', () => {
    expect(
      problemsOf(() =>
        loadConfig({
          env: { BOXRELAY_CONFIG: '/c.yaml', BOXRELAY_ACCOUNTS_FILE: '/a.yaml' },
          readFile: files({ '/c.yaml': `accounts: [{name: prod, secrets: [${PROD}]}]\n`, '/a.yaml': `- {name: qa, secrets: [${STAGING}]}\n` }),
        }),
      ),
    ).toEqual(['BOXRELAY_ACCOUNTS_FILE and accounts are both set: keep one']);
    expect(problemsOf(() => loadConfig({ env: { BOXRELAY_ACCOUNTS_FILE: '/none.yaml' }, readFile: files({}) }))).toEqual(['/none.yaml: cannot read (ENOENT)']);
    expect(problemsOf(() => loadConfig({ env: { BOXRELAY_ACCOUNTS: 'prod' } }))).toEqual([
      'accounts: give the account list in a file (BOXRELAY_ACCOUNTS_FILE) or as a list in BOXRELAY_CONFIG',
    ]);
    expect(problemsOf(withAccounts('name: prod\n'))).toEqual(['accounts file: accounts: Invalid input: expected array, received object']);
  });

  it('shows accounts with their secrets and API keys hidden', () => {
    const config = withAccounts(`- {name: prod, secrets: [${PROD}, ${STAGING}], upstreamBaseUrl: "https://u:pw@api.example/v1", upstreamApiKey: sk_secret_key}\n`)();
    const shown = JSON.stringify(redactConfig(config));
    for (const hidden of [PROD, STAGING, 'sk_secret_key', 'pw@']) expect(shown).not.toContain(hidden);
    expect(redactConfig(config).accounts).toEqual([{ name: 'prod', secrets: ['***', '***'], upstreamBaseUrl: 'https://u:***@api.example/v1', upstreamApiKey: '***' }]);
  });
});

describe('boxrelay config check with accounts', () => {
  beforeAll(requireBuild);

  it('reads the accounts file and its secrets files as serve does, hiding every secret', async () => {
    const database = sqliteFile();
    const dir = dirname(database);
    writeFileSync(join(dir, 'staging-secrets'), `${STAGING}\n`);
    writeFileSync(join(dir, 'accounts.yaml'), `- {name: prod, secrets: [${PROD}], upstreamBaseUrl: https://api.example/v1, upstreamApiKey: sk_prod_key}\n- {name: staging, secretsFile: ${join(dir, 'staging-secrets')}}\n`);
    const result = await runCli(['config', 'check'], { BOXRELAY_DATABASE: database, BOXRELAY_ACCOUNTS_FILE: join(dir, 'accounts.yaml') });
    expect(result.code).toBe(0);
    expect(result.stderr).toBe('boxrelay: no signing secret for the default account in BOXRELAY_SECRETS or the secrets file: POST /webhooks answers 404 unless the database holds one\n');
    for (const hidden of [PROD, STAGING, 'sk_prod_key']) expect(result.stdout).not.toContain(hidden);
    expect((parseYaml(result.stdout) as { accounts: unknown }).accounts).toEqual([
      { name: 'prod', secrets: ['***'], upstreamBaseUrl: 'https://api.example/v1', upstreamApiKey: '***' },
      { name: 'staging', secrets: [], secretsFile: join(dir, 'staging-secrets') },
    ]);
  });

  it('exits 2 with one line per problem', async () => {
    const database = sqliteFile();
    const accounts = join(dirname(database), 'accounts.yaml');
    writeFileSync(accounts, `- {name: default, secrets: [${PROD}]}\n- {name: qa}\n`);
    const result = await runCli(['config', 'check'], { BOXRELAY_DATABASE: database, BOXRELAY_ACCOUNTS_FILE: accounts });
    expect(result.code).toBe(2);
    expect(result.stdout).toBe('');
    expect(result.stderr).toBe(
      [
        'boxrelay: invalid configuration: accounts file: accounts.0.name: default is the account of BOXRELAY_SECRETS and is reserved',
        'boxrelay: invalid configuration: accounts file: accounts.1.secrets: account qa: no signing secret (give secrets or secretsFile)',
        '',
      ].join('\n'),
    );
  });
});
