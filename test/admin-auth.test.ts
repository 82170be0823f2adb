import request from 'supertest';
import { afterEach, describe, expect, it } from 'vitest';
import { ADMIN_TOKEN, adminClient, adminConfig } from './support/admin.js';
import { testRelay, type TestRelay } from './support/relay.js';

const ADMIN_PATHS: ['get' | 'delete' | 'post', string][] = [
  ['get', '/admin/events'],
  ['get', '/admin/boxes'],
  ['get', '/admin/boxes/bx_1'],
  ['delete', '/admin/boxes/bx_1'],
  ['get', '/admin/dead-letters'],
  ['delete', '/admin/dead-letters/1'],
  ['post', '/admin/dead-letters/1/retry'],
  ['post', '/admin/replay'],
  ['get', '/admin/version'],
  ['get', '/admin/anything'],
];

/** Each admin route and the methods it serves; every other method is 405. */
const ADMIN_ROUTES: [string, string[]][] = [
  ['/admin/events', ['get']],
  ['/admin/boxes', ['get']],
  ['/admin/boxes/bx_1', ['get', 'delete']],
  ['/admin/dead-letters', ['get']],
  ['/admin/dead-letters/1', ['delete']],
  ['/admin/dead-letters/1/retry', ['post']],
  ['/admin/replay', ['post']],
  ['/admin/log', ['get']],
  ['/admin/version', ['get']],
];
const METHODS = ['get', 'post', 'put', 'patch', 'delete'] as const;

let t: TestRelay;
afterEach(() => t.close());

const errorBody = (code: string) => ({ ok: false, code, message: expect.any(String), requestId: expect.stringMatching(/^req_/) });

describe('/admin with BOXRELAY_ADMIN_TOKEN unset', () => {
  it('answers 404 not_found on every admin path, with or without a token', async () => {
    t = await testRelay();
    for (const [method, path] of ADMIN_PATHS) {
      for (const auth of [undefined, `Bearer ${ADMIN_TOKEN}`]) {
        const call = request(t.relay.internalApp)[method](path);
        const response = await (auth ? call.set('Authorization', auth) : call);
        expect(response.status, `${method} ${path}`).toBe(404);
        expect(response.body).toEqual(errorBody('not_found'));
      }
    }
  });
});

describe('/admin with a token', () => {
  it('answers 401 without the token or with a wrong one, on every admin path', async () => {
    t = await testRelay(adminConfig);
    const wrong = [undefined, '', `Bearer ${ADMIN_TOKEN}x`, `Bearer ${ADMIN_TOKEN.slice(0, -1)}`, `Bearer${ADMIN_TOKEN}`, ADMIN_TOKEN, `Basic ${ADMIN_TOKEN}`, 'Bearer '];
    for (const [method, path] of ADMIN_PATHS) {
      for (const auth of wrong) {
        const call = request(t.relay.internalApp)[method](path);
        const response = await (auth === undefined ? call : call.set('Authorization', auth));
        expect(response.status, `${method} ${path} with ${auth}`).toBe(401);
        expect(response.body).toEqual(errorBody('unauthorized'));
        expect(response.headers['www-authenticate']).toBe('Bearer');
        expect(response.text).not.toContain(ADMIN_TOKEN);
      }
    }
  });

  it('serves the right token, and answers 404 not_found past the known routes', async () => {
    t = await testRelay(adminConfig);
    const admin = adminClient(t);
    expect((await admin.get('/admin/events')).status).toBe(200);
    // The scheme is case-insensitive (RFC 7235); the token is not.
    for (const auth of [`bearer ${ADMIN_TOKEN}`, `BEARER ${ADMIN_TOKEN}`, `BeArEr  ${ADMIN_TOKEN}`]) {
      expect((await request(t.relay.internalApp).get('/admin/events').set('Authorization', auth)).status, auth).toBe(200);
    }
    expect((await request(t.relay.internalApp).get('/admin/events').set('Authorization', `bearer ${ADMIN_TOKEN.toUpperCase()}`)).status).toBe(401);
    expect((await admin.get('/admin/boxes')).status).toBe(200);
    const unknown = await admin.get('/admin/anything');
    expect(unknown.status).toBe(404);
    expect(unknown.body).toEqual(errorBody('not_found'));
    expect((await admin.call('post', '/admin/boxes')).status).toBe(405);
    admin.expectNoSecrets();
  });

  it('answers 405 method_not_allowed for any other method on every admin route', async () => {
    t = await testRelay(adminConfig);
    for (const [path, served] of ADMIN_ROUTES) {
      for (const method of METHODS.filter((m) => !served.includes(m))) {
        const response = await request(t.relay.internalApp)[method](path).set('Authorization', `Bearer ${ADMIN_TOKEN}`).send({});
        expect(response.status, `${method} ${path}`).toBe(405);
        expect(response.body, `${method} ${path}`).toEqual(errorBody('method_not_allowed'));
        const allow = served.flatMap((m) => (m === 'get' ? ['GET', 'HEAD'] : [m.toUpperCase()])).join(', ');
        expect(response.headers.allow, `${method} ${path}`).toBe(allow);
      }
    }
  });

  it('refuses a bad limit, cursor, since or repeated filter with 400 invalid_request', async () => {
    t = await testRelay(adminConfig);
    const admin = adminClient(t);
    const boxCursor = Buffer.from(JSON.stringify('bx_1')).toString('base64url');
    const numberCursor = Buffer.from(JSON.stringify(5)).toString('base64url');
    const bad = [
      '/admin/events?limit=0',
      '/admin/events?limit=201',
      '/admin/events?limit=abc',
      '/admin/events?limit=1.5',
      '/admin/events?limit=-1',
      '/admin/events?limit=1&limit=2',
      '/admin/events?cursor=not-a-cursor',
      `/admin/events?cursor=${boxCursor}`, // a box cursor is no event position
      `/admin/events?cursor=${numberCursor}`,
      '/admin/events?since=yesterday',
      '/admin/events?since=2026-11-21T10:00:00', // no zone
      '/admin/events?since=2026-13-01T00:00:00Z',
      '/admin/events?type=box.ready&type=box.error',
      '/admin/boxes?limit=500',
      '/admin/boxes?cursor=%%%',
      `/admin/boxes?cursor=${numberCursor}`,
      '/admin/boxes?state=ready&state=error',
    ];
    for (const path of bad) {
      const response = await admin.get(path);
      expect(response.status, path).toBe(400);
      expect(response.body, path).toEqual(errorBody('invalid_request'));
    }
    for (const good of ['/admin/events?limit=1', '/admin/events?limit=200', '/admin/events?since=2026-11-21T10:00:00%2B01:00', '/admin/boxes?limit=200']) {
      expect((await admin.get(good)).status, good).toBe(200);
    }
    admin.expectNoSecrets();
  });
});
