import request from 'supertest';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { testRelay, type TestRelay } from './support/relay.js';
import { delivery, sendRaw } from './support/sign.js';

/**
 * The receiver writes its answers with plain node:http calls, the rest of the app with Express's:
 * both must look alike, headers included. Only the exact path reaches the receiver.
 */
describe('the receiver and the rest of the public app', () => {
  let t: TestRelay;
  beforeEach(async () => {
    t = await testRelay();
  });
  afterEach(() => t.close());

  const post = (path: string, d = delivery({ timestamp: t.clock.seconds })) =>
    sendRaw(request(t.relay.publicApp).post(path).set(d.headers), d.body);
  const shape = (response: request.Response) => ({
    contentType: response.headers['content-type'],
    contentLength: response.headers['content-length'],
    requestId: /^req_[0-9a-f]{32}$/.test(String(response.headers['x-request-id'])),
    etag: response.headers.etag,
    poweredBy: response.headers['x-powered-by'],
  });
  const expected = {
    contentType: 'application/json; charset=utf-8',
    contentLength: expect.any(String),
    requestId: true,
    etag: undefined,
    poweredBy: undefined,
  };

  it('accepts at /webhooks and /webhooks?query; /webhooks/ and /Webhooks answer 404 with the same headers', async () => {
    for (const path of ['/webhooks', '/webhooks?from=upstream']) {
      const answer = await post(path);
      expect(answer.body).toEqual({ ok: true, id: expect.stringMatching(/^evt_/), duplicate: false });
      expect(shape(answer)).toEqual(expected);
    }
    for (const path of ['/webhooks/', '/Webhooks']) {
      const answer = await post(path);
      expect(answer.status).toBe(404);
      expect(answer.body).toEqual({ ok: false, code: 'not_found', message: expect.any(String), requestId: answer.headers['x-request-id'] });
      expect(shape(answer)).toEqual(expected);
    }
  });

  it('refuses naming the request id of the X-Request-Id header', async () => {
    const d = delivery({ timestamp: t.clock.seconds, signature: 'v1=abc' });
    const response = await post('/webhooks', d);
    expect(response.status).toBe(401);
    expect(response.headers['content-type']).toBe('application/json; charset=utf-8');
    expect(response.body).toEqual({ ok: false, code: 'malformed_signature', message: expect.any(String), requestId: response.headers['x-request-id'] });
  });

  it('leaves other methods on /webhooks to Express (405)', async () => {
    const response = await request(t.relay.publicApp).delete('/webhooks');
    expect(response.status).toBe(405);
    expect(response.body).toMatchObject({ ok: false, code: 'method_not_allowed' });
  });
});
