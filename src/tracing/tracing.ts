import { ROOT_CONTEXT, SpanKind, SpanStatusCode, defaultTextMapGetter, defaultTextMapSetter, trace, type Attributes, type Span, type Tracer } from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { OTLPTraceExporter as OtlpJsonExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { OTLPTraceExporter as OtlpProtobufExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { resourceFromAttributes } from '@opentelemetry/resources';
import {
  AlwaysOffSampler,
  AlwaysOnSampler,
  BatchSpanProcessor,
  ParentBasedSampler,
  TraceIdRatioBasedSampler,
  TracerProvider,
  type Sampler,
} from '@opentelemetry/sdk-trace';
import { describeError, RelayError } from '../errors.js';
import { untrusted } from '../log.js';

/** One span of the relay's own (contract section 11); a no-op when tracing is off. */
export interface TraceSpan {
  /** W3C `traceparent` of this span, to store with fan-out work or send along; undefined when off. */
  readonly traceparent: string | undefined;
  /** `trace_id` and `span_id` for log lines; empty when off. */
  readonly logFields: { trace_id?: string; span_id?: string };
  /** Ends the span with these attributes; an error marks it failed. */
  end(attributes?: Attributes, error?: unknown): void;
}

export interface Tracing {
  readonly enabled: boolean;
  /** The server span of one `POST /webhooks`, continuing the request's `traceparent` when it has one. */
  receive(headers: Record<string, string | string[] | undefined>): TraceSpan;
  /** A span in the trace of `traceparent` (one stored with the work), or a new trace without one. */
  child(name: string, kind: 'producer' | 'client' | 'internal', traceparent: string | null | undefined, attributes?: Attributes): TraceSpan;
  /** Sends what is buffered; after it, spans are dropped. */
  shutdown(): Promise<void>;
}

/** `trace_id` and `span_id` of a stored W3C traceparent, for the log lines about its work. */
export function logFieldsOf(traceparent: string | null | undefined): { trace_id?: string; span_id?: string } {
  const [, traceId, spanId] = traceparent?.split('-') ?? [];
  return traceId && spanId ? { trace_id: traceId, span_id: spanId } : {};
}

const OFF_SPAN: TraceSpan = { traceparent: undefined, logFields: {}, end: () => {} };

export const tracingOff: Tracing = {
  enabled: false,
  receive: () => OFF_SPAN,
  child: () => OFF_SPAN,
  shutdown: async () => {},
};

/** A setting of the standard `OTEL_*` variables the relay cannot use; named in the message. */
export class TracingConfigError extends RelayError {
  readonly code = 'invalid_tracing_config';
}

const KINDS = { producer: SpanKind.PRODUCER, client: SpanKind.CLIENT, internal: SpanKind.INTERNAL } as const;

/**
 * Tracing from the standard OpenTelemetry variables: off (costing nothing) unless an OTLP endpoint is
 * set. The provider is not registered globally: the relay passes its tracer and the W3C propagator
 * where they are used, so nothing else in the process is traced by accident.
 */
export function createTracing(env: Record<string, string | undefined>): Tracing {
  const tracesEndpoint = env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT;
  const endpoint = env.OTEL_EXPORTER_OTLP_ENDPOINT;
  if (!tracesEndpoint && !endpoint) return tracingOff;
  const url = tracesEndpoint || `${endpoint!.replace(/\/+$/, '')}/v1/traces`;
  const protocol = env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL || env.OTEL_EXPORTER_OTLP_PROTOCOL || 'http/protobuf';
  const headers = parseHeaders(env.OTEL_EXPORTER_OTLP_TRACES_HEADERS ?? env.OTEL_EXPORTER_OTLP_HEADERS);
  let exporter;
  if (protocol === 'http/json') exporter = new OtlpJsonExporter({ url, headers });
  else if (protocol === 'http/protobuf') exporter = new OtlpProtobufExporter({ url, headers });
  else throw new TracingConfigError(`OTEL_EXPORTER_OTLP_PROTOCOL: ${JSON.stringify(untrusted(protocol, 32))} is not supported; use http/protobuf or http/json`);

  const delay = Number(env.OTEL_BSP_SCHEDULE_DELAY ?? 5000);
  const provider = new TracerProvider({
    resource: resourceFromAttributes({ 'service.name': env.OTEL_SERVICE_NAME || 'boxrelay' }),
    sampler: samplerOf(env.OTEL_TRACES_SAMPLER, env.OTEL_TRACES_SAMPLER_ARG),
    spanProcessors: [new BatchSpanProcessor({ exporter, scheduledDelayMillis: Number.isFinite(delay) && delay >= 0 ? delay : 5000 })],
  });
  const tracer = provider.getTracer('boxrelay');
  const propagator = new W3CTraceContextPropagator();

  const parentOf = (carrier: Record<string, unknown>) => propagator.extract(ROOT_CONTEXT, carrier, defaultTextMapGetter);
  const wrap = (span: Span): TraceSpan => {
    const carrier: Record<string, string> = {};
    propagator.inject(trace.setSpan(ROOT_CONTEXT, span), carrier, defaultTextMapSetter);
    const { traceId, spanId } = span.spanContext();
    return {
      traceparent: carrier.traceparent,
      logFields: { trace_id: traceId, span_id: spanId },
      end(attributes, error) {
        if (attributes) span.setAttributes(attributes);
        if (error !== undefined) span.setStatus({ code: SpanStatusCode.ERROR, message: describeError(error) });
        span.end();
      },
    };
  };
  const start = (t: Tracer, name: string, kind: SpanKind, carrier: Record<string, unknown>, attributes?: Attributes) =>
    wrap(t.startSpan(name, { kind, ...(attributes ? { attributes } : {}) }, parentOf(carrier)));

  return {
    enabled: true,
    receive: (headers) => start(tracer, 'POST /webhooks', SpanKind.SERVER, headers, { 'http.request.method': 'POST', 'http.route': '/webhooks' }),
    child: (name, kind, traceparent, attributes) => start(tracer, name, KINDS[kind], traceparent ? { traceparent } : {}, attributes),
    shutdown: () => provider.shutdown(),
  };
}

/** `OTEL_TRACES_SAMPLER` (default `parentbased_always_on`) and its ratio argument. */
function samplerOf(name = 'parentbased_always_on', arg?: string): Sampler {
  const ratio = () => {
    const value = arg === undefined ? 1 : Number(arg);
    if (!(value >= 0 && value <= 1)) throw new TracingConfigError('OTEL_TRACES_SAMPLER_ARG: expected a ratio from 0 to 1, e.g. 0.1');
    return new TraceIdRatioBasedSampler(value);
  };
  switch (name) {
    case 'always_on':
      return new AlwaysOnSampler();
    case 'always_off':
      return new AlwaysOffSampler();
    case 'traceidratio':
      return ratio();
    case 'parentbased_always_on':
      return new ParentBasedSampler({ root: new AlwaysOnSampler() });
    case 'parentbased_always_off':
      return new ParentBasedSampler({ root: new AlwaysOffSampler() });
    case 'parentbased_traceidratio':
      return new ParentBasedSampler({ root: ratio() });
    default:
      throw new TracingConfigError(
        `OTEL_TRACES_SAMPLER: ${JSON.stringify(untrusted(name, 32))} is not supported; use always_on, always_off, traceidratio or parentbased_*`,
      );
  }
}

/** `key=value,key2=value2` (values URL-encoded), as the OTLP exporter variables define it. */
function parseHeaders(text: string | undefined): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const pair of (text ?? '').split(',')) {
    const at = pair.indexOf('=');
    if (at > 0) headers[pair.slice(0, at).trim()] = decodeURIComponent(pair.slice(at + 1).trim());
  }
  return headers;
}
