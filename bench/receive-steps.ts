/**
 * The receive work of one delivery, step by step, each timed in isolation in this process over many
 * realistic ~1 KB deliveries: what each costs, and how far their sum is from the relay's CPU per 2xx
 * (the rest is node:http, Express, the fan-out and the event loop). Steps run in turns of CONNECTIONS operations
 * (one event-loop turn each, as under load), so asynchronous work (the log's writes, the group
 * commit) is counted where it is done. CPU is the whole process's (threads included), as /proc
 * counts it for the relay.
 */
import { execFileSync, spawn } from 'node:child_process';
import { closeSync, openSync } from 'node:fs';
import type { IncomingMessage } from 'node:http';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { setImmediate as nextTurn } from 'node:timers/promises';
import { Registry } from 'prom-client';
import { systemClock } from '../src/clock.js';
import { DEFAULT_ACCOUNT } from '../src/config/default-account.js';
import { checkDepth, parseEvent, type ParsedEvent } from '../src/events/parse-event.js';
import { readBody } from '../src/http/read-body.js';
import { deliveryLogger } from '../src/http/receive-webhook.js';
import { newRequestId } from '../src/http/request-id.js';
import { pino } from 'pino';
import { createLogger, logDestination, untrusted, type LogDestination, type Logger } from '../src/log.js';
import { createMetrics } from '../src/metrics/metrics.js';
import { openMigrated } from '../src/store/engines/migrate.js';
import { createSqliteWriter } from '../src/store/write/sqlite-writer.js';
import { tracingOff } from '../src/tracing/tracing.js';
import { checkTimestamp, readDeliveryHeaders } from '../src/verify/delivery-headers.js';
import { SecretRing } from '../src/verify/secrets.js';
import { BENCH_SECRET, signedDelivery } from './deliveries.js';

/** Operations per event-loop turn: the load's connections. */
const CONNECTIONS = 50;

export interface StepFigure {
  step: string;
  /** Wall time per operation (the thread is busy or blocked for it). */
  wallMicros: number;
  /** CPU time (user + system, all threads) per operation. */
  cpuMicros: number;
}

export interface ReceiveStepsResult {
  steps: StepFigure[];
  lines: string[];
}

interface Delivery {
  headers: Record<string, string[]>;
  timestamp: string;
  body: Buffer;
  deliveryId: string;
  signature: string;
  event: ParsedEvent;
}

function deliveries(count: number, from = 0): Delivery[] {
  return Array.from({ length: count }, (_, i) => {
    const d = signedDelivery(from + i);
    const headers = Object.fromEntries(Object.entries(d.headers).map(([k, v]) => [k, [v]]));
    return {
      headers,
      timestamp: d.headers['x-service-timestamp'] as string,
      body: d.body,
      deliveryId: d.id,
      signature: d.headers['x-service-signature'] as string,
      event: parseEvent(d.body, d.id),
    };
  });
}

/** Runs `op` `count` times in turns of CONNECTIONS, then waits for `settle`; per-operation figures. */
async function timeSteps(step: string, count: number, op: (i: number) => unknown, settle?: () => Promise<void>): Promise<StepFigure> {
  // Warm-up: the JIT and caches, as after the relay's warm-up load.
  for (let i = 0; i < Math.min(count, 2000); i++) await op(i);
  await settle?.();
  const cpu = process.cpuUsage();
  const started = performance.now();
  for (let turn = 0; turn < count; turn += CONNECTIONS) {
    const pending: Promise<unknown>[] = [];
    for (let i = turn; i < Math.min(count, turn + CONNECTIONS); i++) {
      const result = op(i);
      if (result instanceof Promise) pending.push(result);
    }
    if (pending.length > 0) await Promise.all(pending);
    await nextTurn();
  }
  await settle?.();
  const wall = performance.now() - started;
  const used = process.cpuUsage(cpu);
  return { step, wallMicros: (wall * 1000) / count, cpuMicros: (used.user + used.system) / count };
}

/** A pipe with a reader at the other end (as a container runtime reads stdout): its write end. */
let pipes = 0;
function pipeToReader(tmp: string): { fd: number; close(): void } {
  const fifo = join(tmp, `log-${++pipes}.fifo`);
  execFileSync('mkfifo', [fifo]);
  const reader = spawn('sh', ['-c', `cat "${fifo}" > /dev/null`], { stdio: 'ignore' });
  const fd = openSync(fifo, 'w');
  return {
    fd,
    close: () => {
      closeSync(fd);
      reader.kill();
    },
  };
}

export async function runReceiveSteps(options: { tmp: string; iterations?: number }): Promise<StepFigure[]> {
  const n = options.iterations ?? 20_000;
  const input = deliveries(2000);
  const at = (i: number) => input[i % input.length] as Delivery;
  const steps: StepFigure[] = [];
  // The least of three runs: the machine is shared, and other work only ever adds.
  const time = async (...args: Parameters<typeof timeSteps>): Promise<StepFigure> => {
    const runs = [await timeSteps(...args), await timeSteps(...args), await timeSteps(...args)];
    return runs.reduce((least, run) => (run.cpuMicros < least.cpuMicros ? run : least));
  };
  const secrets = new SecretRing({ env: [BENCH_SECRET], clock: systemClock });
  const metrics = createMetrics(new Registry(), { sinks: ['nats'] });

  steps.push(await time('request id', n, () => newRequestId()));
  steps.push(await time('span (tracing off): start + end attributes', n, (i) => {
    const d = at(i);
    const span = tracingOff.receive(d.headers);
    span.end({
      'http.response.status_code': 200,
      'boxrelay.outcome': 'accepted',
      'boxrelay.delivery_id': untrusted(d.deliveryId, 256) as string,
      'boxrelay.event_type': d.event.type,
      ...(d.event.boxId === null ? {} : { 'boxrelay.box_id': d.event.boxId }),
    });
  }));
  steps.push(await time('delivery headers', n, (i) => readDeliveryHeaders(at(i).headers)));
  steps.push(await time('timestamp check', n, (i) => checkTimestamp(at(i).timestamp, Date.now(), 300)));
  steps.push(await time('body read (raw-body over a readable holding the body)', n, (i) => {
    const { body } = at(i);
    const stream = new Readable({ read() {} });
    stream.push(body);
    stream.push(null);
    (stream as unknown as { headers: Record<string, string> }).headers = { 'content-length': String(body.length) };
    return readBody(stream as IncomingMessage, 1024 * 1024);
  }));
  steps.push(await time('HMAC verify (SecretRing.verify)', n, (i) => {
    const d = at(i);
    return secrets.verify(d.deliveryId, d.timestamp, d.signature, d.body);
  }));
  const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });
  steps.push(await time('  UTF-8 decode (part of parseEvent)', n, (i) => utf8.decode(at(i).body)));
  const texts = input.map((d) => d.event.payload);
  steps.push(await time('  depth scan (part of parseEvent)', n, (i) => checkDepth(texts[i % texts.length] as string, 64)));
  steps.push(await time('  JSON.parse (part of parseEvent)', n, (i) => JSON.parse(texts[i % texts.length] as string)));
  steps.push(await time('parseEvent (all of it)', n, (i) => parseEvent(at(i).body, at(i).deliveryId)));

  steps.push(await time('metrics (signature slot, events, delay, outcome)', n, (i) => {
    const { event } = at(i);
    metrics.signatureMatches.inc({ account: DEFAULT_ACCOUNT, slot: '0' });
    metrics.events.inc({ account: DEFAULT_ACCOUNT, type: metrics.eventTypeLabel(event.type) });
    metrics.eventDelay.observe(0.01);
    metrics.webhookRequests.inc({ account: DEFAULT_ACCOUNT, outcome: 'accepted' });
  }));

  const logLine = (logger: Logger) => (i: number) => {
    const d = at(i);
    const started = performance.now();
    logger.info(
      {
        requestId: 'req_0123456789abcdef0123456789abcdef',
        deliveryId: untrusted(d.deliveryId),
        type: untrusted(d.event.type),
        boxId: untrusted(d.event.boxId),
        outcome: 'accepted',
        durationMs: Math.round((performance.now() - started) * 100) / 100,
        ...tracingOff.receive(d.headers).logFields,
      },
      'delivery',
    );
  };
  // Serve's destination, and synchronous writes for comparison (the write mode costs little: the line's making does).
  const variants: [string, (fd: number) => LogDestination][] = [
    ["log line, serve's destination (to a pipe read by another process)", logDestination],
    ['  log line, synchronous writes instead', (fd) => pino.destination({ dest: fd, sync: true })],
  ];
  for (const [step, destinationOf] of variants) {
    const pipe = pipeToReader(options.tmp);
    const destination = destinationOf(pipe.fd);
    // Until the destination has written everything (asynchronous writes finish on later turns).
    const pending = destination as unknown as { _writing: boolean; _len: number };
    const drained = async () => {
      while (pending._writing || pending._len > 0) {
        if (!pending._writing) destination.flush();
        await nextTurn();
      }
    };
    steps.push(await time(step, n, logLine(deliveryLogger(createLogger('info', destination))), drained));
    destination.flushSync();
    pipe.close();
  }

  const { database } = await openMigrated({ url: join(options.tmp, `receive-steps-${process.pid}.db`), sqliteSynchronous: 'FULL' });
  if (database.dialect !== 'sqlite') throw new Error('the steps bench stores to SQLite');
  const writer = createSqliteWriter(database);
  const fresh = deliveries(20_000, 1_000_000);
  const receivedAt = Date.now();
  // Unique ids: each write is a new delivery with one fan-out row (NATS) and a box upsert.
  let written = 0;
  steps.push(await time('store once (group commit, SQLite FULL, per delivery)', Math.floor((fresh.length - 6000) / 3), () => {
    const d = fresh[written++] as Delivery;
    return writer.record({ event: d.event, receivedAt, attempt: 1, sinks: ['nats'] });
  }));
  await database.close();
  return steps;
}

/** CPU µs per 2xx of the measured targets (undefined: not measured in this run). */
export interface MeasuredCpu {
  relay: number | undefined;
  relayNoSink: number | undefined;
  express: number | undefined;
}

/** The steps as a markdown table, their sum against the relay's CPU per 2xx, and the target (relay >= 0.55 x (b)). */
export function renderReceiveSteps(steps: StepFigure[], measured: MeasuredCpu): string[] {
  const f = (n: number) => n.toFixed(1);
  const lines = [
    '## Receive work, step by step (in-process, µs per delivery)',
    '',
    '| step | wall µs | CPU µs |',
    '|---|---:|---:|',
    ...steps.map((s) => `| ${s.step} | ${f(s.wallMicros)} | ${f(s.cpuMicros)} |`),
  ];
  const counted = steps.filter((s) => !s.step.startsWith('  '));
  const wall = counted.reduce((sum, s) => sum + s.wallMicros, 0);
  const cpu = counted.reduce((sum, s) => sum + s.cpuMicros, 0);
  lines.push(`| **sum (indented rows are parts or alternatives, not added)** | **${f(wall)}** | **${f(cpu)}** |`, '');
  lines.push(
    `- Relay CPU µs/2xx: ${measured.relay?.toFixed(0) ?? 'not measured'} (no sink: ${measured.relayNoSink?.toFixed(0) ?? 'not measured'}); ` +
      `the steps above: ${cpu.toFixed(0)} CPU µs; the rest is node:http, the fan-out (same thread), the event loop and GC.`,
    "- Store wall time above its CPU is the thread waiting for the commit's fsync (better-sqlite3 is synchronous): no request is read meanwhile.",
  );
  // A process bound by its one thread serves about 1 / (CPU per request): the ratio of CPU per 2xx stands for the ratio of throughput.
  const byCpu = (target: number | undefined) => (measured.express === undefined || target === undefined ? undefined : measured.express / target);
  const ratio = byCpu(measured.relay);
  lines.push(
    ratio === undefined
      ? '- Target relay / (b) >= 0.55: not evaluated (measure `relay` and `express` in the same run).'
      : `- By CPU per 2xx, relay / (b) ≈ ${ratio.toFixed(2)} (target >= 0.55: ${ratio >= 0.55 ? 'met' : 'not met'})` +
          (byCpu(measured.relayNoSink) === undefined ? '.' : `; with no sink ≈ ${byCpu(measured.relayNoSink)?.toFixed(2)}.`),
  );
  return lines;
}
