import request from 'supertest';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { testRelay, type TestRelay } from './support/relay.js';
import { SECRET, delivery, sendRaw } from './support/sign.js';
import { Registry } from 'prom-client';
import { createPublicApp } from '../src/http/public-app.js';
import { createMetrics } from '../src/metrics/metrics.js';
import { tracingOff } from '../src/tracing/tracing.js';
import { SecretRing } from '../src/verify/secrets.js';
import { ManualClock } from './support/clock.js';
import { captureLogs } from './support/log-capture.js';

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

describe('a fault inside the relay', () => {
  it('answers a delivery whose storing throws with 500 internal_error and no detail, counts it as outcome internal_error and logs it', async () => {
    const clock = new ManualClock();
    const registry = new Registry();
    const logs = captureLogs();
    const metrics = createMetrics(registry, { sinks: [] });
    const app = createPublicApp({
      toleranceSeconds: 300,
      maxBodyBytes: 1024 * 64,
      clock,
      accountOf: (name) => (name === 'default' ? { name, secrets: new SecretRing({ env: [SECRET], clock }) } : undefined),
      accept: () => Promise.reject(new Error('boom')),
      tracing: tracingOff,
      metrics,
      readiness: async () => ({ ok: true, checks: {} }),
      logger: logs.logger,
    });
    const d = delivery({ timestamp: clock.seconds });
    const response = await sendRaw(request(app).post('/webhooks').set(d.headers), d.body);
    expect(response.status).toBe(500);
    expect(response.body).toEqual({ ok: false, code: 'internal_error', message: 'internal error', requestId: expect.stringMatching(/^req_/) });
    expect(await registry.getSingleMetricAsString('boxrelay_webhook_requests_total')).toContain('{account="default",outcome="internal_error"} 1');
    expect(logs.entries().some((e) => e.msg === 'delivery failed inside the relay')).toBe(true);
    expect(logs.entries().some((e) => e.msg === 'delivery' && e.outcome === 'internal_error')).toBe(true);
  });
});
