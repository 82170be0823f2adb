import { mkdtempSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { createTracing, TracingConfigError } from '../src/tracing/tracing.js';
import { sqliteFile } from './support/databases.js';
import { waitFor } from './support/fanout.js';
import { fanoutFixture } from './support/fanout-relay.js';
import type { HookRequest } from './support/hook-server.js';
import { collect, natsClient, ownNats, uniqueNames } from './support/nats.js';
import { requireBuild, runCli, type RelayProcess } from './support/process.js';
import { SECRET, delivery } from './support/sign.js';
import { startFakeSandbox } from './support/fake-sandbox.js';

beforeAll(requireBuild);
const { defer, server, serve, relay: inProcessRelay } = fanoutFixture();

interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind: number;
  attributes: { key: string; value: { stringValue?: string; intValue?: string | number; boolValue?: boolean } }[];
}

/** A local OTLP/HTTP receiver (JSON encoding): every span it was sent. */
async function otlpReceiver() {
  const spans: OtlpSpan[] = [];
  const http = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      expect(req.url).toBe('/v1/traces');
      expect(req.headers['content-type']).toContain('application/json');
      const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as {
        resourceSpans: { resource: { attributes: OtlpSpan['attributes'] }; scopeSpans: { spans: OtlpSpan[] }[] }[];
      };
      for (const rs of body.resourceSpans) {
        expect(rs.resource.attributes).toContainEqual({ key: 'service.name', value: { stringValue: 'boxrelay' } });
        for (const ss of rs.scopeSpans) spans.push(...ss.spans);
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  defer(() => new Promise((resolve) => http.close(resolve)));
  return { url: `http://127.0.0.1:${(http.address() as AddressInfo).port}`, spans };
}

const attr = (span: OtlpSpan, key: string) => {
  const value = span.attributes.find((a) => a.key === key)?.value;
  return value?.stringValue ?? (value?.intValue === undefined ? value?.boolValue : Number(value.intValue));
};
const traceOf = (traceparent: string | undefined) => traceparent?.split('-')[1];
const SERVER = 2;
const CLIENT = 3;
const PRODUCER = 4;

async function post(relay: RelayProcess, options: { boxId: string; traceparent?: string }): Promise<string> {
  const d = delivery({ boxId: options.boxId, type: 'box.error', timestamp: Math.floor(Date.now() / 1000) });
  const headers = { ...d.headers, ...(options.traceparent ? { traceparent: options.traceparent } : {}) };
  const res = await fetch(`http://127.0.0.1:${relay.port}/webhooks`, { method: 'POST', headers, body: d.body });
  expect(res.status).toBe(200);
  return d.id;
}

function hooksFile(url: string, extra = ''): string {
  const dir = mkdtempSync(join(tmpdir(), 'boxrelay-tracing-'));
  writeFileSync(join(dir, 'hooks.yaml'), `- name: h\n  url: ${url}\n  timeoutMs: 20000\n${extra}`);
  return join(dir, 'hooks.yaml');
}

describe('tracing with OpenTelemetry (OTLP/HTTP JSON)', () => {
  it('a receive span with the contract attributes; NATS and hook attempts in its trace, carrying its traceparent; an incoming traceparent continued', async () => {
    const otlp = await otlpReceiver();
    const hook = await server();
    const names = uniqueNames();
    const nats = await ownNats();
    defer(() => nats.kill());
    const client = await natsClient(nats.url);
    defer(() => client.close());
    const published = collect(client.nc, `${names.prefix}.>`);
    const relay = await serve({
      BOXRELAY_SECRETS: SECRET,
      BOXRELAY_DATABASE: sqliteFile(),
      BOXRELAY_HOOKS_FILE: hooksFile(hook.url),
      BOXRELAY_NATS_URL: nats.url,
      BOXRELAY_NATS_SUBJECT_PREFIX: names.prefix,
      BOXRELAY_NATS_STREAM: names.stream,
      OTEL_EXPORTER_OTLP_ENDPOINT: otlp.url,
      OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
      OTEL_BSP_SCHEDULE_DELAY: '50',
    });

    const id = await post(relay, { boxId: 'bx_t' });
    const [message] = await published.received(1);
    const [request] = await hook.received(1);
    const receive = await waitFor(() => otlp.spans.find((s) => s.kind === SERVER && attr(s, 'boxrelay.delivery_id') === id), 'the receive span');
    expect(receive.name).toBe('POST /webhooks');
    expect({
      method: attr(receive, 'http.request.method'),
      status: attr(receive, 'http.response.status_code'),
      type: attr(receive, 'boxrelay.event_type'),
      box: attr(receive, 'boxrelay.box_id'),
      outcome: attr(receive, 'boxrelay.outcome'),
    }).toEqual({ method: 'POST', status: 200, type: 'box.error', box: 'bx_t', outcome: 'accepted' });
    expect(receive.parentSpanId ?? '').toBe('');

    // The messages carry the traceparent of their attempt span, which is a child of the receive span.
    const natsParent = message!.headers?.get('traceparent');
    const hookParent = (request as HookRequest).headers.traceparent as string | undefined;
    expect(traceOf(natsParent)).toBe(receive.traceId);
    expect(traceOf(hookParent)).toBe(receive.traceId);
    const publish = await waitFor(() => otlp.spans.find((s) => s.kind === PRODUCER && s.traceId === receive.traceId), 'the publish span');
    expect(publish.name).toBe(`publish ${names.prefix}.box.error.bx_t`);
    expect(publish.parentSpanId).toBe(receive.spanId);
    expect(natsParent!.split('-')[2]).toBe(publish.spanId);
    const hookSpan = await waitFor(() => otlp.spans.find((s) => s.kind === CLIENT && s.traceId === receive.traceId), 'the hook span');
    expect(hookSpan).toMatchObject({ name: 'POST', parentSpanId: receive.spanId });
    expect(attr(hookSpan, 'boxrelay.sink')).toBe('h');

    // An incoming traceparent is continued.
    const upstreamTrace = '4bf92f3577b34da6a3ce929d0e0e4736';
    const continued = await post(relay, { boxId: 'bx_c', traceparent: `00-${upstreamTrace}-00f067aa0ba902b7-01` });
    const child = await waitFor(() => otlp.spans.find((s) => attr(s, 'boxrelay.delivery_id') === continued && s.kind === SERVER), 'the continued span');
    expect(child).toMatchObject({ traceId: upstreamTrace, parentSpanId: '00f067aa0ba902b7' });
    // Log lines of the request carry the ids.
    const logged = await relay.waitForLog((e) => e.msg === 'delivery' && e.deliveryId === continued);
    expect(logged).toMatchObject({ trace_id: upstreamTrace, span_id: child.spanId });
    await hook.received(2);
  });

  it('after a SIGKILL and a restart, the fan-out of an event accepted before the kill joins its trace', async () => {
    const otlp = await otlpReceiver();
    let hang = true;
    const hook = await server(() => (hang ? 'hang' : 200));
    const env = {
      BOXRELAY_SECRETS: SECRET,
      BOXRELAY_DATABASE: sqliteFile(),
      BOXRELAY_HOOKS_FILE: hooksFile(hook.url),
      OTEL_EXPORTER_OTLP_ENDPOINT: otlp.url,
      OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
      OTEL_BSP_SCHEDULE_DELAY: '50',
    };
    const first = await serve(env);
    const id = await post(first, { boxId: 'bx_k' });
    await hook.received(1);
    const receive = await waitFor(() => otlp.spans.find((s) => attr(s, 'boxrelay.delivery_id') === id && s.kind === SERVER), 'the receive span');
    first.child.kill('SIGKILL');
    await first.exited;

    hang = false;
    // The restarted relay: the fixture kills it at the end.
    await serve(env);
    const [, again] = await hook.received(2);
    expect(traceOf(again!.headers.traceparent as string)).toBe(receive.traceId);
    const attempt = await waitFor(
      () => otlp.spans.find((s) => s.kind === CLIENT && s.traceId === receive.traceId && s.spanId === (again!.headers.traceparent as string).split('-')[2]),
      'the attempt span of the restarted relay',
    );
    expect(attempt.parentSpanId).toBe(receive.spanId);
  });

  it('a reconciliation run is a span of its own, and the fan-out of its events joins its trace', async () => {
    const otlp = await otlpReceiver();
    const hook = await server();
    const upstream = await startFakeSandbox();
    defer(() => upstream.close());
    const tracing = createTracing({ OTEL_EXPORTER_OTLP_ENDPOINT: otlp.url, OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json', OTEL_BSP_SCHEDULE_DELAY: '50' });
    const t = await inProcessRelay(
      { upstreamBaseUrl: upstream.baseUrl, upstreamApiKey: upstream.apiKey, reconcileInterval: '0', hooks: [{ name: 'h', url: hook.url }] },
      { tracing },
    );
    // Watching since before the box changed.
    await t.relay.store.database.kysely.updateTable('relay_meta').set({ value: new Date(t.clock.now() - 60_000).toISOString() }).where('name', '=', 'watch_start').execute();
    upstream.setBox({ id: 'bx_r', name: 'r', state: 'error', updatedAt: new Date(t.clock.now() - 1000).toISOString() });
    const run = await (await t.relay.reconciler!.start({ dryRun: false })).finished;
    expect(run.eventsSynthesized).toBe(1);
    const [request] = await hook.received(1);
    const span = await waitFor(() => otlp.spans.find((s) => s.name === 'reconcile'), 'the run span');
    expect(attr(span, 'boxrelay.reconcile.run_id')).toBe(run.id);
    expect(attr(span, 'boxrelay.reconcile.outcome')).toBe('succeeded');
    expect(traceOf(request!.headers.traceparent as string)).toBe(span.traceId);
  });

  it('with no endpoint set: no exporter, no traceparent on hook requests', async () => {
    expect(createTracing({}).enabled).toBe(false);
    expect(createTracing({ OTEL_SERVICE_NAME: 'x', OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json' }).enabled).toBe(false);
    const hook = await server();
    const relay = await serve({ BOXRELAY_SECRETS: SECRET, BOXRELAY_DATABASE: sqliteFile(), BOXRELAY_HOOKS_FILE: hooksFile(hook.url) });
    const incoming = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
    await post(relay, { boxId: 'bx_off', traceparent: incoming });
    const [request] = await hook.received(1);
    expect(request!.headers.traceparent).toBeUndefined();
    const logged = await relay.waitForLog((e) => e.msg === 'delivery');
    expect(logged).not.toHaveProperty('trace_id');
  });

  it('refuses OTEL settings it cannot use, naming the variable (exit 2)', async () => {
    expect(() => createTracing({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:1', OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' })).toThrow(TracingConfigError);
    const result = await runCli(['serve'], {
      BOXRELAY_SECRETS: SECRET,
      BOXRELAY_DATABASE: sqliteFile(),
      PORT: '0',
      BOXRELAY_INTERNAL_PORT: '0',
      OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:1',
      OTEL_TRACES_SAMPLER: 'sometimes',
    });
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('OTEL_TRACES_SAMPLER');
  });
});
