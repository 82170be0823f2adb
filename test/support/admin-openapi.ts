import type { IncomingMessage, OutgoingHttpHeaders, ServerResponse } from 'node:http';
import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { ADMIN_OPERATIONS, adminDocument, type OpenApiDocument } from '../../src/http/admin/openapi.js';
import { packageVersion } from '../../src/package-version.js';

// Every admin answer the suite gets from a test relay (test/support/relay.ts) is checked here
// against the OpenAPI document the relay serves: its status is one the document gives for that
// method and path, and its body matches that status's schema. A mismatch is kept, and the test that
// got it fails (test/support/setup.ts).

export const ADMIN_DOCUMENT: OpenApiDocument = adminDocument(ADMIN_OPERATIONS, packageVersion());

export interface AdminAnswer {
  method: string;
  /** The request's path and query, as sent. */
  url: string;
  status: number;
  headers: OutgoingHttpHeaders;
  body: string;
}

const ajv = new Ajv2020({ allErrors: true, strict: false });
addFormats.default(ajv);
const compiled = new WeakMap<object, ValidateFunction>();
const validatorOf = (schema: object): ValidateFunction => {
  let validate = compiled.get(schema);
  if (!validate) compiled.set(schema, (validate = ajv.compile(schema)));
  return validate;
};

interface Template {
  template: string;
  pattern: RegExp;
  parameters: number;
}
const templatesOf = new WeakMap<OpenApiDocument, Template[]>();

/** The documented path a request's path stands for (`/admin/events/{id}`): a literal path before one with parameters. */
export function templateOf(path: string, document: OpenApiDocument = ADMIN_DOCUMENT): string | undefined {
  let templates = templatesOf.get(document);
  if (!templates) {
    templates = Object.keys(document.paths).map((template) => ({
      template,
      pattern: new RegExp(`^${template.replaceAll('.', '\\.').replace(/\{\w+\}/g, '[^/]+')}$`),
      parameters: (template.match(/\{/g) ?? []).length,
    }));
    templatesOf.set(document, templates);
  }
  return templates.filter(({ pattern }) => pattern.test(path)).sort((a, b) => a.parameters - b.parameters)[0]?.template;
}

function bodyProblems(schema: object, answer: AdminAnswer): string[] {
  let body: unknown;
  try {
    body = JSON.parse(answer.body);
  } catch {
    return [`the body is not JSON: ${answer.body.slice(0, 200)}`];
  }
  const validate = validatorOf(schema);
  if (validate(body)) return [];
  return (validate.errors ?? []).map((error) => `body${error.instancePath} ${error.message ?? ''} ${JSON.stringify(error.params)}`);
}

/** An error answer of any route: `{"ok":false,"code","message","requestId"}`. */
const anyError = { type: 'object', properties: { ok: { const: false }, code: { type: 'string' }, message: { type: 'string' }, requestId: { type: 'string' } }, required: ['ok', 'code', 'message', 'requestId'], additionalProperties: false };

/** What in one admin answer the document does not allow (nothing: an empty list). */
export function answerProblems(answer: AdminAnswer, document: OpenApiDocument = ADMIN_DOCUMENT): string[] {
  // The path as sent: an encoded dot segment (`%2E%2E`) is an id, not a step up.
  const [sent = '', query = ''] = answer.url.split(/\?(.*)/s);
  // `/admin/boxes/?id=<id>` stands for `/admin/boxes/<id>` (src/http/admin/router.ts).
  const path = /^\/admin\/(boxes|events)\/$/.test(sent) && new URLSearchParams(query).has('id') ? `${sent}{id}` : sent;
  const template = templateOf(path, document);
  const withAuth = (statuses: number[]) => (statuses.includes(answer.status) ? [] : [`status ${answer.status}, expected ${statuses.join(' or ')}`]);
  if (template === undefined) {
    // Not a documented path: refused (the token is checked first), or not found.
    return [...withAuth([401, 404]).map((p) => `an undocumented path: ${p}`), ...bodyProblems(anyError, answer)];
  }
  const item = document.paths[template] ?? {};
  const method = answer.method.toLowerCase() === 'head' ? 'get' : answer.method.toLowerCase();
  const operation = item[method];
  if (!operation) {
    const allow = Object.keys(item).flatMap((m) => (m === 'get' ? ['GET', 'HEAD'] : [m.toUpperCase()]));
    const problems = [...withAuth([401, 405]), ...bodyProblems(anyError, answer)];
    if (answer.status === 405 && String(answer.headers.allow) !== allow.join(', ')) problems.push(`Allow: ${String(answer.headers.allow)}, the document serves ${allow.join(', ')}`);
    return problems.map((p) => `${answer.method} is not documented for ${template}: ${p}`);
  }
  const response = operation.responses[String(answer.status)];
  if (!response) return [`status ${answer.status} is not documented (documented: ${Object.keys(operation.responses).join(', ')}): ${answer.body.slice(0, 300)}`];
  if (answer.method.toUpperCase() === 'HEAD') return [];
  const schema = response.content?.['application/json'].schema;
  if (!schema) return answer.body === '' ? [] : [`status ${answer.status} has no body in the document, but got ${answer.body.slice(0, 200)}`];
  const contentType = String(answer.headers['content-type'] ?? '');
  const problems = contentType.startsWith('application/json') ? [] : [`Content-Type ${contentType}, expected application/json`];
  return [...problems, ...bodyProblems(schema, answer)];
}

const found: string[] = [];

/** The mismatches found since the last call (test/support/setup.ts fails the test that got any). */
export function takeAdminMismatches(): string[] {
  return found.splice(0);
}

/** Checks one admin answer, keeping its mismatches for the test that got it. */
export function checkAdminAnswer(answer: AdminAnswer): void {
  for (const problem of answerProblems(answer)) found.push(`${answer.method} ${answer.url} answered ${answer.status}: ${problem}`);
}

/** Keeps what the app sends for `/admin` requests, and checks each answer once sent. */
function observe(req: IncomingMessage, res: ServerResponse): void {
  const method = req.method ?? 'GET';
  const url = req.url ?? '/';
  if (!/^\/admin(?:[/?]|$)/.test(url)) return;
  const chunks: Buffer[] = [];
  const keep = (chunk: unknown, encoding?: unknown) => {
    if (chunk === undefined || chunk === null || typeof chunk === 'function') return;
    chunks.push(Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk as string, typeof encoding === 'string' ? (encoding as BufferEncoding) : 'utf8'));
  };
  const { write, end } = res;
  res.write = function (this: ServerResponse, chunk: unknown, ...rest: unknown[]) {
    keep(chunk, rest[0]);
    return (write as (...args: unknown[]) => boolean).call(this, chunk, ...rest);
  } as ServerResponse['write'];
  res.end = function (this: ServerResponse, chunk?: unknown, ...rest: unknown[]) {
    keep(chunk, rest[0]);
    return (end as (...args: unknown[]) => ServerResponse).call(this, chunk, ...rest);
  } as ServerResponse['end'];
  res.once('finish', () => {
    checkAdminAnswer({ method, url, status: res.statusCode, headers: res.getHeaders(), body: Buffer.concat(chunks).toString('utf8') });
  });
}

/** The app, its `/admin` answers each checked against the document (the same app in every other way). */
export function checkingAdminAnswers<App extends (req: IncomingMessage, res: ServerResponse) => unknown>(app: App): App {
  return new Proxy(app, {
    apply(target, thisArg, args: [IncomingMessage, ServerResponse, ...unknown[]]) {
      observe(args[0], args[1]);
      return Reflect.apply(target, thisArg, args);
    },
  });
}
