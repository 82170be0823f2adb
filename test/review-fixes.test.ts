import { once } from 'node:events';
import { connect } from 'node:net';
import express from 'express';
import { Registry } from 'prom-client';
import request from 'supertest';
import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../src/config/load.js';
import { createPublicApp } from '../src/http/public-app.js';
import { tracingOff } from '../src/tracing/tracing.js';
import { listen } from '../src/http/listen.js';
import { createMetrics } from '../src/metrics/metrics.js';
import { SecretRing } from '../src/verify/secrets.js';
import { ManualClock } from './support/clock.js';
import { captureLogs } from './support/log-capture.js';
import { testRelay } from './support/relay.js';
import { SECRET, delivery, eventId, sendRaw } from './support/sign.js';

describe('box events with an unusual box name', () => {
  it('accepts a null or non-string name: only data.box.id is required', async () => {
    const t = await testRelay();
    try {
      for (const name of [null, 42]) {
        const id = eventId();
        const body = JSON.stringify({ id, type: 'box.ready', createdAt: '2026-11-21T10:00:00.000Z', data: { box: { id: `bx_${String(name)}`, name }, state: 'ready' } });
        expect((await t.post({ id, body })).body).toEqual({ ok: true, id, duplicate: false });
      }
      const names = await t.relay.store.database.kysely.selectFrom('boxes').select('name').execute();
      expect(names).toEqual([{ name: null }, { name: null }]);
    } finally {
      await t.close();
    }
  });
});

describe('hook URLs', () => {
  it('refuses credentials in a hook URL (fetch would refuse them and echo them in its error)', () => {
    const load = () =>
      loadConfig({ env: { BOXRELAY_HOOKS_FILE: '/h.yaml' }, readFile: () => '- {name: a, url: "https://user:hunter2@hooks.internal/x"}\n' });
    expect(load).toThrow(ConfigError);
    try {
      load();
    } catch (error) {
      expect((error as ConfigError).problems).toEqual(['hooks file: hooks.0.url: put credentials in headers (Authorization), not in the URL']);
    }
  });
});

describe('metrics that follow changes', () => {
  it('drops a by-sink gauge to its real value when a sink leaves the counts', async () => {
    const registry = new Registry();
    let dead: Record<string, number> = { gone: 3 };
    createMetrics(registry, { sinks: ['nats'], sources: { deadLettersBySink: async () => dead } });
    expect(await registry.getSingleMetricAsString('boxrelay_dead_letters')).toContain('boxrelay_dead_letters{sink="gone"} 3');
    dead = {};
    const after = await registry.getSingleMetricAsString('boxrelay_dead_letters');
    expect(after).not.toContain('sink="gone"');
    expect(after).toContain('boxrelay_dead_letters{sink="nats"} 0');
  });

  it('starts the counter of a secret slot that appears later at 0', async () => {
    const registry = new Registry();
    let accepted = [{ slot: 0 }];
    createMetrics(registry, { sinks: [], sources: { secrets: () => accepted } });
    await registry.metrics();
    accepted = [{ slot: 0 }, { slot: 1 }];
    await registry.metrics();
    expect(await registry.getSingleMetricAsString('boxrelay_signature_secret_matches_total')).toContain(
      'boxrelay_signature_secret_matches_total{slot="1"} 0',
    );
  });
});

describe('a fault inside the relay', () => {
  it('answers 500 internal_error, counts and logs it, and sends no detail', async () => {
    const clock = new ManualClock();
    const registry = new Registry();
    const logs = captureLogs();
    const metrics = createMetrics(registry, { sinks: [] });
    const app = createPublicApp({
      toleranceSeconds: 300,
      maxBodyBytes: 1024 * 64,
      clock,
      secrets: new SecretRing({ env: [SECRET], clock }),
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
    expect(await registry.getSingleMetricAsString('boxrelay_webhook_requests_total')).toContain('{outcome="internal_error"} 1');
    expect(logs.entries().some((e) => e.msg === 'delivery failed inside the relay')).toBe(true);
    expect(logs.entries().some((e) => e.msg === 'delivery' && e.outcome === 'internal_error')).toBe(true);
  });
});

describe('graceful close', () => {
  it('answers a pipelined request that arrives during shutdown without throwing', async () => {
    let releaseSlow!: () => void;
    let slowStarted!: () => void;
    const started = new Promise<void>((resolve) => (slowStarted = resolve));
    const app = express();
    // Its headers go out before shutdown starts, so its connection stays open for the next request.
    app.get('/slow', async (_req, res) => {
      res.write('sl');
      slowStarted();
      await new Promise<void>((resolve) => (releaseSlow = resolve));
      res.end('ow');
    });
    app.get('/fast', (_req, res) => void res.send('fast'));
    const listening = await listen(app, 0, '127.0.0.1');
    const socket = connect(listening.port, '127.0.0.1');
    await once(socket, 'connect');
    let received = '';
    socket.on('data', (chunk: Buffer) => (received += chunk.toString()));
    socket.write('GET /slow HTTP/1.1\r\nHost: x\r\n\r\n');
    await started;
    const closed = listening.close(5000);
    socket.write('GET /fast HTTP/1.1\r\nHost: x\r\n\r\n');
    const socketClosed = once(socket, 'close');
    releaseSlow();
    await closed;
    await socketClosed;
    expect(received).toContain('sl');
    expect(received).toContain('fast');
    expect(received.toLowerCase()).toContain('connection: close');
    socket.destroy();
  });
});
