import { Validator } from '@seriousme/openapi-schema-validator';
import express, { type Express } from 'express';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { statusByCode } from '../src/http/status.js';
import { openApiPath } from '../src/http/admin/openapi.js';
import { adminClient, adminConfig } from './support/admin.js';
import { ADMIN_DOCUMENT, answerProblems, checkingAdminAnswers, takeAdminMismatches, type AdminAnswer } from './support/admin-openapi.js';
import { testRelay, type TestRelay } from './support/relay.js';

interface RouteLayer {
  route?: { path: string; methods: Record<string, boolean> };
  handle: { stack?: RouteLayer[] };
  match(path: string): boolean;
}

/** The routes the admin router mounts, read from the app: `get /admin/events/{id}`, and `all` for a path's 405. */
function mountedAdminRoutes(app: Express): string[] {
  const stack = (app as unknown as { router: { stack: RouteLayer[] } }).router.stack;
  const admin = stack.find((layer) => layer.handle.stack !== undefined && layer.match('/admin'));
  if (!admin?.handle.stack) throw new Error('no router is mounted at /admin');
  return admin.handle.stack.flatMap((layer) =>
    layer.route ? Object.keys(layer.route.methods).map((method) => `${method.replace('_all', 'all')} ${openApiPath(layer.route?.path ?? '')}`) : [],
  );
}

const documented = (document: typeof ADMIN_DOCUMENT) =>
  Object.entries(document.paths).flatMap(([path, item]) => Object.keys(item).map((method) => `${method} ${path}`));

describe('GET /admin/openapi.json (contract section 22)', () => {
  let t: TestRelay;
  beforeAll(async () => {
    t = await testRelay(adminConfig);
  });
  afterAll(() => t.close());

  it('answers, behind the admin token, the OpenAPI 3.1 document an OpenAPI validator accepts', async () => {
    const admin = adminClient(t);
    const answer = await admin.get('/admin/openapi.json');
    expect(answer.status).toBe(200);
    expect(answer.body).toEqual(ADMIN_DOCUMENT);
    const validator = new Validator();
    expect(await validator.validate(answer.body as Record<string, unknown>)).toEqual({ valid: true });
    expect(validator.version).toBe('3.1');
    expect((await request(t.relay.internalApp).get('/admin/openapi.json')).status).toBe(401);
    admin.expectNoSecrets();
  });

  it('describes every route mounted under /admin, and nothing the relay does not mount', () => {
    const mounted = mountedAdminRoutes(t.relay.internalApp);
    const served = mounted.filter((route) => !route.startsWith('all '));
    expect(served.length).toBeGreaterThan(20);
    expect([...served].sort()).toEqual(documented(ADMIN_DOCUMENT).sort());
    // Each documented path answers its other methods 405 with `Allow` (checked on every answer the suite gets).
    const paths = new Set(Object.keys(ADMIN_DOCUMENT.paths));
    expect(new Set(mounted.filter((route) => route.startsWith('all ')).map((route) => route.slice(4)))).toEqual(paths);
  });

  it('gives each route the error answers of its codes, at the status src/http/status.ts maps each to', () => {
    for (const [path, item] of Object.entries(ADMIN_DOCUMENT.paths)) {
      for (const [method, operation] of Object.entries(item)) {
        expect(operation.responses['401'], `${method} ${path}`).toBeDefined();
        for (const [status, response] of Object.entries(operation.responses)) {
          const codes = (response.content?.['application/json'].schema as { properties?: { code?: { enum?: string[] } } } | undefined)?.properties?.code?.enum;
          for (const code of codes ?? []) expect(statusByCode[code as keyof typeof statusByCode], `${method} ${path} ${code}`).toBe(Number(status));
        }
      }
    }
  });
});

describe('the check of every admin answer against the document (test/support/admin-openapi.ts)', () => {
  const box = { id: 'bx_1', account: 'default', name: null, state: 'ready', previousState: null, stateChangedAt: null, lastEventId: null, hydratedAt: null };
  const answer = (over: Partial<AdminAnswer> & { json?: unknown }): AdminAnswer => ({
    method: 'GET',
    url: '/admin/boxes/bx_1',
    status: 200,
    headers: { 'content-type': 'application/json; charset=utf-8' },
    body: JSON.stringify(over.json ?? { ok: true, box }),
    ...over,
  });

  it('passes an answer the document gives', () => {
    expect(answerProblems(answer({}))).toEqual([]);
    expect(answerProblems(answer({ url: '/admin/boxes/?id=bx_1' }))).toEqual([]);
    expect(answerProblems(answer({ method: 'DELETE', status: 204, body: '', headers: {} }))).toEqual([]);
    const refused = { ok: false, code: 'unauthorized', message: 'm', requestId: 'r' };
    expect(answerProblems(answer({ status: 401, json: refused }))).toEqual([]);
    expect(answerProblems(answer({ method: 'POST', status: 405, headers: { allow: 'GET, HEAD, DELETE' }, json: { ...refused, code: 'method_not_allowed' } }))).toEqual([]);
  });

  it('finds a field the document lacks, one missing or of another type, a status or code it does not give, and a wrong Allow', () => {
    expect(answerProblems(answer({ json: { ok: true, box: { ...box, secret: 'x' } } })).join()).toContain('additional');
    expect(answerProblems(answer({ json: { ok: true, box: { ...box, state: 3 } } })).join()).toContain('/box/state');
    expect(answerProblems(answer({ json: { ok: true } })).join()).toContain('box');
    expect(answerProblems(answer({ status: 202 })).join()).toContain('status 202 is not documented');
    expect(answerProblems(answer({ status: 404, json: { ok: false, code: 'reconcile_in_progress', message: 'm', requestId: 'r' } })).join()).toContain('/code');
    expect(answerProblems(answer({ method: 'POST', status: 405, headers: { allow: 'GET' }, json: { ok: false, code: 'method_not_allowed', message: 'm', requestId: 'r' } })).join()).toContain('Allow');
  });

  it('keeps a mismatch of an app it wraps for the test that got it (test/support/setup.ts fails that test)', async () => {
    const app = express();
    app.get('/admin/not-a-route', (_req, res) => res.json({ ok: true }));
    await request(checkingAdminAnswers(app)).get('/admin/not-a-route').expect(200);
    const mismatches = takeAdminMismatches();
    expect(mismatches[0]).toBe('GET /admin/not-a-route answered 200: an undocumented path: status 200, expected 401 or 404');
    expect(mismatches.slice(1).join()).toContain('body');
    expect(takeAdminMismatches()).toEqual([]);
  });
});
