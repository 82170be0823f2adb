import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, normalize } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { BUS_NAMES } from '../src/config/schema.js';
import { ADMIN_OPERATIONS } from '../src/http/admin/openapi.js';
import { AUDIT_ACTIONS } from '../src/store/state/audit.js';

/**
 * The user docs against the code: no internal work items (an operator cannot look them up), and
 * every admin route they name is one the relay serves. The routes are the admin operations (the
 * source of GET /admin/openapi.json, which test/admin-openapi.test.ts holds to the routes a relay
 * mounts), never listed by hand.
 */

const repoRoot = join(import.meta.dirname, '..');

/** Pages written for users: the README and docs/*.md, less the shared contract and the performance log (a dated record of work). */
const USER_DOCS = [
  'README.md',
  ...readdirSync(join(repoRoot, 'docs'))
    .filter((file) => file.endsWith('.md') && file !== 'relay-contract.md' && file !== 'performance.md')
    .map((file) => `docs/${file}`),
];

const read = (page: string) => readFileSync(join(repoRoot, page), 'utf8');

/** Words that name the project's own work items rather than what the relay does ("stops 5 s" is no work item). */
const WORK_ITEMS = [/\bissues?\s+#?\d+/gi, /\bstops?\s+\d+\b(?![.,]?\d|\s*(?:ms|s|seconds?|minutes?|%)\b)/gi, /\bthis\s+stop\b/gi];

const METHODS = ['get', 'post', 'put', 'patch', 'delete'] as const;
type Method = Uppercase<(typeof METHODS)[number]>;

interface Route {
  method: Method;
  /** The path under `/admin`, as Express takes it (`/events/:id`). */
  path: string;
}

/** The admin routes the relay serves: each operation of src/http/admin/ (the routes mount their paths). */
function adminRoutesInCode(): { routes: Route[] } {
  return { routes: ADMIN_OPERATIONS.map(({ method, path }) => ({ method: method.toUpperCase() as Method, path })) };
}

/** An Express path as a pattern of the concrete paths it serves (`:id` is one non-empty segment). */
function pathPattern(path: string): RegExp {
  const source = path
    .split('/')
    .map((segment) => (segment.startsWith(':') ? '[^/]+' : segment.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')))
    .join('/');
  return new RegExp(`^${source}$`);
}

interface Mention {
  page: string;
  method: Method | undefined;
  /** The path under `/admin`, without its query. */
  path: string;
  text: string;
}

/**
 * A path the docs name, as the router sees it: the query dropped, except that `/boxes/?id=` and
 * `/events/?id=` stand for one box or event (the router's `itemByQuery`).
 */
function routerPath(raw: string): string | undefined {
  const [path = '', query = ''] = raw.split('?');
  if (path.endsWith('*')) return undefined;
  const under = path.slice('/admin'.length);
  if (under.endsWith('/') && /(^|&)id=/.test(query)) return `${under}:id`;
  return under.replace(/\/$/, '') || '/';
}

/** The admin paths a page names: in code spans (with the method written before the path), and in curl commands of its code blocks. */
function adminMentions(page: string, text: string): Mention[] {
  const mentions: Mention[] = [];
  const fences = text.split(/^```.*$/m);
  fences.forEach((part, index) => {
    if (index % 2 === 1) {
      // A code block: each command (continuation lines joined) that names an admin path.
      for (const command of part.replace(/\\\n/g, ' ').split('\n')) {
        const url = /(?:https?:\/\/[^\s"'/]+|\$RELAY|\$\{RELAY\})(\/admin\/[^\s"']*)/.exec(command)?.[1];
        if (url === undefined) continue;
        const explicit = /(?:-X|--request)\s+([A-Z]+)/.exec(command)?.[1];
        const method = (explicit ?? (/\s(-d|--data\S*)\s/.test(command) ? 'POST' : 'GET')) as Method;
        const path = routerPath(url);
        if (path !== undefined) mentions.push({ page, method, path, text: command.trim() });
      }
      return;
    }
    for (const [, span = ''] of part.matchAll(/`([^`]+)`/g)) {
      const code = span.replace(/\s+/g, ' ');
      const found = /(?:^|\s)(?:(GET|POST|PUT|PATCH|DELETE)\s+)?(\/admin\/[^\s]*)/.exec(code);
      if (!found) continue;
      const path = routerPath(found[2] ?? '');
      if (path !== undefined) mentions.push({ page, method: found[1] as Method | undefined, path, text: code });
    }
  });
  return mentions;
}

describe('the user docs against the code', () => {
  it('name no internal work item (an issue, a stop of the plan): they say what the code does', () => {
    const found = USER_DOCS.flatMap((page) =>
      WORK_ITEMS.flatMap((pattern) => [...read(page).matchAll(pattern)].map(([words]) => `${page}: "${words.replace(/\s+/g, ' ')}"`)),
    );
    expect(found).toEqual([]);
  });

  it('link to no page from that page itself (an anchor of the page is `#…`)', () => {
    const selfLinks = USER_DOCS.flatMap((page) =>
      [...read(page).matchAll(/\]\(([^)#\s]+)(#[^)\s]*)?\)/g)]
        .filter(([, target = '']) => !/^[a-z]+:/.test(target) && normalize(join(dirname(page), target)) === normalize(page))
        .map(([link]) => `${page}: ${link}`),
    );
    expect(selfLinks).toEqual([]);
  });

  it('read every admin route from the operations the relay mounts', () => {
    const { routes } = adminRoutesInCode();
    // The parser finds the contract's routes, so an empty or partial read cannot pass for a clean one.
    for (const [method, path] of [
      ['GET', '/events'],
      ['GET', '/events/:id'],
      ['DELETE', '/boxes/:boxId'],
      ['POST', '/replay'],
      ['POST', '/sinks/:name/pause'],
    ] as const) {
      expect(routes).toContainEqual({ method, path });
    }
  });

  it('name only admin routes the relay serves, with a method it serves them for', () => {
    const { routes } = adminRoutesInCode();
    const served = routes.map((route) => ({ ...route, pattern: pathPattern(route.path) }));
    const mentions = USER_DOCS.flatMap((page) => adminMentions(page, read(page)));
    expect(mentions.length).toBeGreaterThan(20);
    const unknown = mentions
      .filter(({ method, path }) => !served.some((route) => route.pattern.test(path) && (method === undefined || route.method === method)))
      .map(({ page, text }) => `${page}: ${text}`);
    expect(unknown).toEqual([]);
  });
});

describe('docs/deployment.md against the chart', () => {
  const deployment = read('docs/deployment.md');
  const values = parseYaml(read('helm/boxrelay/values.yaml')) as Record<string, unknown> & { config: object; secrets: object };
  const rules = parseYaml(read('helm/boxrelay/files/alerts.rules.yml')) as { groups: { rules: { alert?: string }[] }[] };

  it('gives every config.* value a row of the values table', () => {
    expect(Object.keys(values.config).filter((key) => !deployment.includes(`| \`config.${key}\` |`))).toEqual([]);
  });

  it('gives every secrets.* entry a row of the secrets table', () => {
    expect(Object.keys(values.secrets).filter((key) => !deployment.includes(`| \`secrets.${key}\``))).toEqual([]);
  });

  it('names every other value of values.yaml', () => {
    expect(Object.keys(values).filter((key) => !new RegExp(`\`${key}[\`.]`).test(deployment))).toEqual([]);
  });

  it('gives every alert rule a row of the alert table', () => {
    const alerts = rules.groups.flatMap((group) => group.rules.flatMap((rule) => (rule.alert ? [rule.alert] : [])));
    expect(alerts.length).toBeGreaterThan(10);
    expect(alerts.filter((alert) => !deployment.includes(`| \`${alert}\` |`))).toEqual([]);
  });
});

describe('the buses', () => {
  it('are each named where a page lists the sinks a bus can be', () => {
    const list = BUS_NAMES.map((name) => `\`${name}\``).join(', ');
    for (const page of ['docs/buses.md', 'docs/fan-out.md', 'docs/operations.md']) {
      expect(read(page).replace(/\s+/g, ' '), `${page} lists the buses' sink names`).toContain(list);
    }
  });
});

describe('the audit actions', () => {
  it('are each listed where the docs list them, and offered by the console\'s filter', () => {
    const operations = read('docs/operations.md');
    const listed = /Every change made through `\/admin\/\*` or the CLI \(([^)]*)\)/.exec(operations)?.[1] ?? '';
    const console = /Every change an operator made, through this console, the admin API or the CLI \(([^)]*)\)/.exec(read('docs/console.md'))?.[1] ?? '';
    const offered = /const ACTIONS = \[([^\]]*)\]/.exec(read('console/src/views-audit.ts'))?.[1] ?? '';
    for (const action of AUDIT_ACTIONS) {
      expect(listed, 'docs/operations.md, "Audit trail"').toContain(`\`${action}\``);
      expect(console.replace(/\s+/g, ' '), 'docs/console.md, "Audit"').toContain(action.replace('_', ' '));
      expect(offered, 'console/src/views-audit.ts').toContain(`'${action}'`);
    }
  });
});

describe('reading admin routes out of a page', () => {
  it('takes code spans with or without a method, drops the query, and reads curl commands', () => {
    const page = [
      'See `GET /admin/dead-letters?sink=&limit=` and `/admin/sinks`, `POST /admin/replay {"since":"x"}`,',
      'a box as `DELETE /admin/boxes/?id=`, everything as `/admin/*`, and `GET',
      '/admin/log`.',
      '```sh',
      'curl -s -X POST -H "$AUTH" \\',
      '  "http://127.0.0.1:9091/admin/sinks/alerts/pause"',
      'curl -s -H "$AUTH" -d \'{"sink":"a"}\' "$RELAY/admin/dead-letters/retry"',
      'curl -s -H "$AUTH" "$RELAY/admin/boxes/bx_abc"',
      '```',
    ].join('\n');
    expect(adminMentions('p.md', page).map(({ method, path }) => `${method ?? '*'} ${path}`)).toEqual([
      'GET /dead-letters',
      '* /sinks',
      'POST /replay',
      'DELETE /boxes/:id',
      'GET /log',
      'POST /sinks/alerts/pause',
      'POST /dead-letters/retry',
      'GET /boxes/bx_abc',
    ]);
  });
});
