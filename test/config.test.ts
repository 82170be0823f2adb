import { describe, expect, it } from 'vitest';
import { loadConfig } from '../src/config/load.js';
import { configKeys, envNameOf } from '../src/config/schema.js';
import { files, problemsOf } from './support/config-files.js';

describe('configuration', () => {
  it('has the contract defaults', () => {
    const config = loadConfig({ env: {} });
    expect(config).toMatchObject({
      port: 8080,
      host: '0.0.0.0',
      internalPort: 9091,
      internalHost: '0.0.0.0',
      secrets: [],
      toleranceSeconds: 300,
      maxBodyBytes: 262144,
      database: './data/boxrelay.db',
      retentionDays: 30,
      natsSubjectPrefix: 'sandbox',
      natsMode: 'jetstream',
      natsStream: 'SANDBOX_EVENTS',
      natsDuplicateWindow: 3_600_000,
      source: 'sandbox',
      logLevel: 'info',
      hooks: [],
      sqliteSynchronous: 'FULL',
    });
    expect(config.natsUrl).toBeUndefined();
    expect(config.adminToken).toBeUndefined();
    // Unset: each sink's lease is computed from its timeout and retries.
    expect(config.outboxLeaseMs).toBeUndefined();
  });

  it('reads BOXRELAY_SHUTDOWN_DELAY as a duration: 5s by default, 0 stops at once', () => {
    expect(loadConfig({ env: {} }).shutdownDelay).toBe(5000);
    expect(loadConfig({ env: { BOXRELAY_SHUTDOWN_DELAY: '0' } }).shutdownDelay).toBe(0);
    expect(loadConfig({ env: { BOXRELAY_SHUTDOWN_DELAY: '1500ms' } }).shutdownDelay).toBe(1500);
    expect(loadConfig({ env: { BOXRELAY_SHUTDOWN_DELAY: '1m' } }).shutdownDelay).toBe(60_000);
    expect(problemsOf(() => loadConfig({ env: { BOXRELAY_SHUTDOWN_DELAY: '5' } }))).toEqual([
      'BOXRELAY_SHUTDOWN_DELAY: expected 0 or a duration such as 30s, 10m or 1h; e.g. BOXRELAY_SHUTDOWN_DELAY=5s',
    ]);
  });

  it('reads the scheduled backup settings: off by default, every 1d keeping 7, at least a minute apart, SQLite only', () => {
    const defaults = loadConfig({ env: {} });
    expect([defaults.backupDir, defaults.backupInterval, defaults.backupKeep]).toEqual([undefined, 86_400_000, 7]);
    expect(loadConfig({ env: { BOXRELAY_BACKUP_DIR: '/backups', BOXRELAY_BACKUP_INTERVAL: '6h', BOXRELAY_BACKUP_KEEP: '3' } })).toMatchObject({
      backupDir: '/backups',
      backupInterval: 6 * 3_600_000,
      backupKeep: 3,
    });
    expect(problemsOf(() => loadConfig({ env: { BOXRELAY_BACKUP_INTERVAL: '30s', BOXRELAY_BACKUP_KEEP: '0' } }))).toEqual([
      'BOXRELAY_BACKUP_INTERVAL: expected 1m or more; e.g. BOXRELAY_BACKUP_INTERVAL=1d',
      'BOXRELAY_BACKUP_KEEP: Too small: expected number to be >0; e.g. BOXRELAY_BACKUP_KEEP=7',
    ]);
    expect(problemsOf(() => loadConfig({ env: { BOXRELAY_BACKUP_DIR: '/backups', BOXRELAY_DATABASE: 'postgres://relay@db:5432/relay' } }))).toEqual([
      'BOXRELAY_BACKUP_DIR: scheduled backups copy a SQLite database and BOXRELAY_DATABASE names PostgreSQL: unset it and back up with pg_dump',
    ]);
  });

  it('refuses an admin token shorter than 32 characters, naming BOXRELAY_ADMIN_TOKEN and how to make one, never echoing it', () => {
    const token = 'x'.repeat(31);
    const problems = problemsOf(() => loadConfig({ env: { BOXRELAY_ADMIN_TOKEN: token } }));
    expect(problems).toHaveLength(1);
    expect(problems[0]).toMatch(/^BOXRELAY_ADMIN_TOKEN: must be at least 32 characters/);
    expect(problems[0]).toContain('openssl rand -hex 32');
    expect(problems[0]).not.toContain(token);
    expect(problemsOf(() => loadConfig({ env: { BOXRELAY_CONFIG: '/c.yaml' }, readFile: files({ '/c.yaml': 'adminToken: short\n' }) }))[0]).toMatch(
      /^BOXRELAY_CONFIG \(\/c.yaml\) adminToken: must be at least 32 characters/,
    );
    expect(loadConfig({ env: { BOXRELAY_ADMIN_TOKEN: 'x'.repeat(32) } }).adminToken).toBe('x'.repeat(32));
  });

  it('names env vars as the contract does', () => {
    expect(envNameOf('port')).toBe('PORT');
    expect(envNameOf('host')).toBe('HOST');
    expect(envNameOf('logLevel')).toBe('LOG_LEVEL');
    expect(envNameOf('internalPort')).toBe('BOXRELAY_INTERNAL_PORT');
    expect(envNameOf('natsTlsCaFile')).toBe('BOXRELAY_NATS_TLS_CA_FILE');
    expect(envNameOf('upstreamApiKey')).toBe('BOXRELAY_UPSTREAM_API_KEY');
    expect(envNameOf('outboxLeaseMs')).toBe('BOXRELAY_OUTBOX_LEASE_MS');
    expect(configKeys.map(envNameOf)).toContain('BOXRELAY_NATS_DUPLICATE_WINDOW');
  });

  it('reads a YAML config file and lets env vars override it', () => {
    const config = loadConfig({
      env: { BOXRELAY_CONFIG: '/etc/boxrelay.yaml', BOXRELAY_TOLERANCE_SECONDS: '120', PORT: '9000' },
      readFile: files({
        '/etc/boxrelay.yaml': 'port: 7000\ntoleranceSeconds: 60\nsecrets: [whsec_a, whsec_b]\nnatsDuplicateWindow: 10m\nhooks:\n  - name: alerts\n    url: https://hooks.internal/x\n    events: ["box.error"]\n',
      }),
    });
    expect(config.port).toBe(9000);
    expect(config.toleranceSeconds).toBe(120);
    expect(config.secrets).toEqual(['whsec_a', 'whsec_b']);
    expect(config.natsDuplicateWindow).toBe(600_000);
    expect(config.natsMaxAge).toBeUndefined(); // the NATS sink takes the retention window
    expect(loadConfig({ env: { BOXRELAY_NATS_MAX_AGE: '0' } }).natsMaxAge).toBe(0);
    expect(loadConfig({ env: { BOXRELAY_NATS_MAX_AGE: '7d' } }).natsMaxAge).toBe(7 * 86_400_000);
    expect(config.hooks[0]).toMatchObject({ name: 'alerts', events: ['box.error'], format: 'cloudevents', timeoutMs: 5000, maxAttempts: 8 });
  });

  it('reads a JSON config file and comma-separated secrets from the env', () => {
    const config = loadConfig({
      env: { BOXRELAY_CONFIG: '/c.json', BOXRELAY_SECRETS: ' whsec_new , whsec_old ,' },
      readFile: files({ '/c.json': '{"retentionDays": 7, "secrets": "whsec_file"}' }),
    });
    expect(config.retentionDays).toBe(7);
    expect(config.secrets).toEqual(['whsec_new', 'whsec_old']);
  });

  it('reads the hooks file', () => {
    const config = loadConfig({
      env: { BOXRELAY_HOOKS_FILE: '/hooks.yaml' },
      readFile: files({ '/hooks.yaml': '- name: chat\n  url: http://127.0.0.1:3000/slack\n  format: slack\n  events: ["box.*"]\n' }),
    });
    expect(config.hooks).toEqual([
      expect.objectContaining({ name: 'chat', format: 'slack', events: ['box.*'], headers: {} }),
    ]);
  });

  it('reports every problem, one line each, naming the env var', () => {
    const problems = problemsOf(() =>
      loadConfig({
        env: { PORT: 'eighty', BOXRELAY_NATS_MODE: 'fast', BOXRELAY_NATS_DUPLICATE_WINDOW: 'an hour', BOXRELAY_UPSTREAM_BASE_URL: 'ftp://x' },
      }),
    );
    expect(problems).toHaveLength(4);
    expect(problems.some((p) => p.startsWith('PORT:'))).toBe(true);
    expect(problems.some((p) => p.startsWith('BOXRELAY_NATS_MODE:'))).toBe(true);
    expect(problems.some((p) => p.startsWith('BOXRELAY_NATS_DUPLICATE_WINDOW:'))).toBe(true);
    expect(problems.some((p) => p.startsWith('BOXRELAY_UPSTREAM_BASE_URL:'))).toBe(true);
    for (const p of problems) expect(p).not.toContain('\n');
  });

  it('shows the upstream API root with its /v1 as the example to copy', () => {
    expect(problemsOf(() => loadConfig({ env: { BOXRELAY_UPSTREAM_BASE_URL: 'ftp://x' } }))[0]).toMatch(
      /; e\.g\. BOXRELAY_UPSTREAM_BASE_URL=https:\/\/[^ ]+\/v1$/,
    );
  });

  it('names the variable, or the config file and its key, with a valid value to copy', () => {
    const problems = problemsOf(() =>
      loadConfig({
        env: { BOXRELAY_CONFIG: '/c.yaml', BOXRELAY_TOLERANCE_SECONDS: 'abc' },
        readFile: files({ '/c.yaml': 'toleranceSeconds: 60\nretentionDays: soon\n' }),
      }),
    );
    expect(problems).toEqual([
      'BOXRELAY_TOLERANCE_SECONDS: expected a number; e.g. BOXRELAY_TOLERANCE_SECONDS=300',
      'BOXRELAY_CONFIG (/c.yaml) retentionDays: expected a number; e.g. retentionDays: 30',
    ]);
  });

  it('refuses unknown file settings, unreadable files and bad hooks', () => {
    expect(problemsOf(() => loadConfig({ env: { BOXRELAY_CONFIG: '/c.yaml' }, readFile: files({ '/c.yaml': 'prot: 1\n' }) }))).toEqual([
      'BOXRELAY_CONFIG (/c.yaml): unknown setting(s) prot',
    ]);
    expect(problemsOf(() => loadConfig({ env: { BOXRELAY_CONFIG: '/nope.yaml' }, readFile: files({}) }))[0]).toContain('cannot read (ENOENT)');
    expect(problemsOf(() => loadConfig({ env: { BOXRELAY_CONFIG: '/c.yaml' }, readFile: files({ '/c.yaml': 'a: [' }) }))[0]).toContain('not valid YAML');
    const hookProblems = problemsOf(() =>
      loadConfig({
        env: { BOXRELAY_HOOKS_FILE: '/h.yaml' },
        readFile: files({ '/h.yaml': '- name: Bad Name\n  url: not-a-url\n- name: nats\n  url: https://x\n  format: msteams\n' }),
      }),
    );
    expect(hookProblems.length).toBeGreaterThanOrEqual(4);
    expect(hookProblems.every((p) => p.startsWith('hooks file: hooks.'))).toBe(true);
    expect(problemsOf(() => loadConfig({ env: { BOXRELAY_NATS_USER: 'u' } }))).toEqual(['BOXRELAY_NATS_USER and BOXRELAY_NATS_PASSWORD go together']);
  });

  it('refuses duplicate hook names', () => {
    const problems = problemsOf(() =>
      loadConfig({ env: { BOXRELAY_HOOKS_FILE: '/h.yaml' }, readFile: files({ '/h.yaml': '- {name: a, url: "https://x"}\n- {name: a, url: "https://y"}\n' }) }),
    );
    expect(problems).toEqual(['hooks file: hooks: hook names must be unique']);
  });

  it('refuses a hook header that cannot be sent, naming the hook and header but never the value', () => {
    const token = 'Bearer s3cret-token-value';
    const withHeaders = (headers: Record<string, string>) => () =>
      loadConfig({ env: { BOXRELAY_CONFIG: '/c.json' }, readFile: files({ '/c.json': JSON.stringify({ hooks: [{ name: 'alerts', url: 'http://x', headers }] }) }) });
    const problems = problemsOf(withHeaders({ Authorization: `${token}\nX-Injected: 1`, 'X-Ok': 'fine' }));
    expect(problems).toHaveLength(1);
    expect(problems[0]).toMatch(/^hooks\.0\.headers: hook alerts, header "Authorization": the value is not a valid HTTP header value/);
    expect(problems[0]).not.toContain('s3cret');
    for (const value of ['a\rb', 'a\u0000b', 'caf\u20ac']) expect(problemsOf(withHeaders({ 'X-Token': value }))).toHaveLength(1);
    expect(problemsOf(withHeaders({ 'X Token': 'fine', 'X-Other:': 'fine' }))).toEqual([
      'hooks.0.headers: hook alerts, header "X Token": not a valid HTTP header name',
      'hooks.0.headers: hook alerts, header "X-Other:": not a valid HTTP header name',
    ]);
    expect(withHeaders({ Authorization: token, 'X-Tab': 'a\tb' })().hooks[0]?.headers).toEqual({ Authorization: token, 'X-Tab': 'a\tb' });
  });
});

describe('hook URLs', () => {
  it('refuses a hook URL with credentials in it, without repeating them (fetch would refuse them and echo them in its error)', () => {
    const problems = problemsOf(() =>
      loadConfig({ env: { BOXRELAY_HOOKS_FILE: '/h.yaml' }, readFile: () => '- {name: a, url: "https://user:hunter2@hooks.internal/x"}\n' }),
    );
    expect(problems).toEqual(['hooks file: hooks.0.url: put credentials in headers (Authorization), not in the URL']);
  });
});
