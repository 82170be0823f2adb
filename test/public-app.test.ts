import request from 'supertest';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { testRelay, type TestRelay } from './support/relay.js';
import { delivery, sendRaw } from './support/sign.js';

/**
 * Every spelling of the receiver's path that Express routes to it answers alike, headers included:
 * the receiver writes its answers with plain node:http calls, the rest of the app with Express's.
 */
describe('the receiver at every path spelling', () => {
  let t: TestRelay;
  beforeEach(async () => {
    t = await testRelay();
  });
  afterEach(() => t.close());

  const post = (path: string, d = delivery({ timestamp: t.clock.seconds })) =>
    sendRaw(request(t.relay.publicApp).post(path).set(d.headers), d.body);
  const shape = (response: request.Response) => ({
    status: response.status,
    contentType: response.headers['content-type'],
    contentLength: response.headers['content-length'],
    requestId: /^req_[0-9a-f]{32}$/.test(String(response.headers['x-request-id'])),
    etag: response.headers.etag,
    poweredBy: response.headers['x-powered-by'],
  });

  it('accepts at /webhooks, /webhooks?query, /webhooks/ and /Webhooks with the same response headers', async () => {
    const answers = await Promise.all(['/webhooks', '/webhooks?from=upstream', '/webhooks/', '/Webhooks'].map((p) => post(p)));
    for (const answer of answers) {
      expect(answer.body).toEqual({ ok: true, id: expect.stringMatching(/^evt_/), duplicate: false });
      expect(shape(answer)).toEqual(shape(answers[0] as request.Response));
    }
    expect(shape(answers[0] as request.Response)).toEqual({
      status: 200,
      contentType: 'application/json; charset=utf-8',
      contentLength: expect.any(String),
      requestId: true,
      etag: undefined,
      poweredBy: undefined,
    });
  });

  it('refuses alike on both paths, naming the request id of the X-Request-Id header', async () => {
    for (const path of ['/webhooks', '/webhooks/']) {
      const d = delivery({ timestamp: t.clock.seconds, signature: 'v1=abc' });
      const response = await post(path, d);
      expect(response.status).toBe(401);
      expect(response.headers['content-type']).toBe('application/json; charset=utf-8');
      expect(response.body).toEqual({ ok: false, code: 'malformed_signature', message: expect.any(String), requestId: response.headers['x-request-id'] });
    }
  });

  it('leaves other methods on /webhooks to Express (405)', async () => {
    const response = await request(t.relay.publicApp).delete('/webhooks');
    expect(response.status).toBe(405);
    expect(response.body).toMatchObject({ ok: false, code: 'method_not_allowed' });
  });
});
