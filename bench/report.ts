import type { LoadResult } from './load.js';
import { BOX_COUNT } from './deliveries.js';
import type { Settings } from './settings.js';

export interface FanoutResult {
  /** 2xx in the measured run; each is a new event. */
  events: number;
  arrived: number;
  /** From the last 2xx until NATS held every event; null when the wait timed out. */
  drainMs: number | null;
  /** Events from the first request until NATS held them all. */
  eventsPerSecond: number | null;
}

/** The relay's worker threads by OS thread name (Node names a worker's thread after its `name` option). */
export const WORKER_THREADS = ['storage', 'checkpointer', 'fanout'];

export interface Measurement {
  key: string;
  label: string;
  round: number;
  load: LoadResult;
  /** The target's CPU time (user + system) per 2xx during the measurement. */
  cpuMicrosPerRequest: number;
  /** Busy CPU time of the whole machine (all processes, all cores) per 2xx during the measurement. */
  machineMicrosPerRequest: number;
  /** The target's main thread's CPU time per 2xx (the fan-out may run in a worker thread). */
  mainThreadMicrosPerRequest: number;
  /** The same of each named worker thread (`WORKER_THREADS`); 0 for a build that does not name it. */
  workerThreadMicrosPerRequest: Record<string, number>;
  fanout: FanoutResult | undefined;
  /** Bytes the target wrote to stdout (the relay's log), warm-up included. */
  logBytes: number;
  /** 2xx answered by this process, warm-up included. */
  requests: number;
  /** 1-minute load average just before the measurement: the machine is shared. */
  loadavg: number;
}

export interface ReportInput {
  settings: Settings;
  measurements: Measurement[];
  startedAt: Date;
  machine: { cpu: string; cores: number; node: string };
  /** Why there is no fan-out figure, if there is none. */
  fanout: string | undefined;
  prefillSeconds: number;
  /** Lines of the sections measured in their own modules. */
  extraLines: string[];
}

/** The receive targets (with fan-out to NATS on, 50 connections). */
const RELAY_OVER_A_TARGET = 0.25;
const RELAY_OVER_B_TARGET = 0.55;
const RELAY_CPU_TARGET_US = 150;

export const median = (values: number[]): number => {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? (sorted[mid] as number) : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2;
};
const int = (n: number): string => Math.round(n).toLocaleString('en');
const ms = (n: number): string => (n >= 10 ? n.toFixed(0) : n.toFixed(1));
/** The median, with the range when there are several rounds. */
const spread = (values: number[], format: (n: number) => string): string =>
  values.length < 2 ? format(values[0] as number) : `${format(median(values))} (${format(Math.min(...values))}–${format(Math.max(...values))})`;

export function renderReport({ settings, measurements, startedAt, machine, fanout, prefillSeconds, extraLines }: ReportInput): string {
  const byKey = new Map<string, Measurement[]>();
  for (const m of measurements) byKey.set(m.key, [...(byKey.get(m.key) ?? []), m]);
  const rate = (key: string) => (byKey.get(key) ?? []).map((m) => m.load.acceptedPerSecond);
  const lines: string[] = [
    '# boxrelay benchmark',
    '',
    `- Date: ${startedAt.toISOString()}`,
    `- Machine: ${machine.cpu}, ${machine.cores} cores; Node ${machine.node}`,
    `- Load: autocannon, ${settings.connections} connections, ${settings.seconds} s measured after ${settings.warmup} s warm-up per target, ` +
      '~1 KB bodies, a unique delivery id and a fresh signature per request, 127.0.0.1',
    `- ${settings.rounds} round(s); in each, the baselines and the relay run back to back, each in its own process` +
      (settings.rounds > 1 ? '; figures are medians (min–max)' : ''),
    '- Relay: `node bin/boxrelay.js serve`, SQLite (synchronous=FULL), NATS configured, stdout (the log) read from a pipe as a container runtime does',
    '',
    '| target | accepted/s (2xx) | p50 ms | p99 ms | max ms | non-2xx | errors | CPU µs/2xx | machine CPU µs/2xx |',
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|',
  ];
  for (const [, group] of byKey) {
    const load = group.map((m) => m.load);
    lines.push(
      `| ${group[0]?.label} | ${spread(rate(group[0]?.key as string), int)} | ${spread(load.map((l) => l.p50), ms)} | ` +
        `${spread(load.map((l) => l.p99), ms)} | ${spread(load.map((l) => l.max), ms)} | ` +
        `${int(load.reduce((s, l) => s + l.non2xx, 0))} | ${int(load.reduce((s, l) => s + l.errors, 0))} | ` +
        `${spread(group.map((m) => m.cpuMicrosPerRequest), int)} | ${spread(group.map((m) => m.machineMicrosPerRequest), int)} |`,
    );
  }
  lines.push('');

  // Ratios per round (the figures that ran back to back), then their median.
  const ratio = (over: string, under: string): string | undefined => {
    const values: number[] = [];
    for (let round = 0; round < settings.rounds; round++) {
      const a = byKey.get(over)?.find((m) => m.round === round);
      const b = byKey.get(under)?.find((m) => m.round === round);
      if (a && b) values.push(a.load.acceptedPerSecond / b.load.acceptedPerSecond);
    }
    return values.length ? spread(values, (n) => n.toFixed(2)) : undefined;
  };
  const relayOverA = ratio('relay', 'http');
  const relayOverB = ratio('relay', 'express');
  const commitOverB = ratio('express-commit', 'express');
  const relayOverC = ratio('relay', 'express-commit');
  const sinklessOverB = ratio('relay-no-sink', 'express');
  if (relayOverA) lines.push(`- relay / (a): ${relayOverA} (target >= ${RELAY_OVER_A_TARGET})`);
  if (relayOverB) lines.push(`- relay / (b): ${relayOverB} (target >= ${RELAY_OVER_B_TARGET})`);
  if (commitOverB) lines.push(`- (c) / (b): ${commitOverB} (what a durable group commit alone costs an Express endpoint)`);
  if (relayOverC) lines.push(`- relay / (c): ${relayOverC}`);
  if (sinklessOverB) lines.push(`- relay with no sink / (b): ${sinklessOverB}`);
  const relayRuns = byKey.get('relay') ?? [];
  if (relayRuns.length) lines.push(`- relay p99: ${spread(relayRuns.map((m) => m.load.p99), ms)} ms (target < 25 ms)`);
  if (relayRuns.length) lines.push(`- relay CPU per 2xx: ${spread(relayRuns.map((m) => m.cpuMicrosPerRequest), int)} µs (target <= ${RELAY_CPU_TARGET_US} µs)`);

  settings.compare.forEach((checkout, i) => {
    const key = `relay-compare-${i + 1}`;
    const compared = ratio('relay', key);
    if (!compared) return;
    // The receive thread is the one a request waits on: its share of the CPU per 2xx, each build's.
    const mainThread = (runs: Measurement[]) => spread(runs.map((m) => m.mainThreadMicrosPerRequest), int);
    const workers = (runs: Measurement[]) => WORKER_THREADS.map((name) => `${name} ${int(median(runs.map((m) => m.workerThreadMicrosPerRequest[name] ?? 0)))}`).join(', ');
    lines.push(
      `- relay / relay from ${checkout}: ${compared}; main thread CPU µs/2xx ${mainThread(relayRuns)} against ${mainThread(byKey.get(key) ?? [])}; ` +
        `worker threads ${workers(relayRuns)} against ${workers(byKey.get(key) ?? [])}`,
    );
  });
  const quiet = ratio('relay', 'relay-quiet');
  if (quiet) {
    const perLine = median(relayRuns.map((m) => m.logBytes / Math.max(1, m.requests)));
    lines.push(`- Cost of logging: relay at info / relay at warn = ${quiet} (one ~${int(perLine)}-byte line per delivery at info)`);
  }

  const traced = ratio('relay-traced', 'relay');
  if (traced) lines.push(`- Cost of tracing: relay with tracing on (every request sampled, OTLP) / relay with tracing off = ${traced}`);
  const perBox = byKey.get('relay-per-box')?.map((m) => m.fanout?.eventsPerSecond).filter((r): r is number => typeof r === 'number') ?? [];
  const unordered = relayRuns.map((m) => m.fanout?.eventsPerSecond).filter((r): r is number => typeof r === 'number');
  if (perBox.length && unordered.length) {
    lines.push(
      `- Cost of per-box order on NATS: fan-out ${int(median(perBox))} events/s per-box vs ${int(median(unordered))} unordered ` +
        `(${(median(perBox) / median(unordered)).toFixed(2)}, target >= 0.90) over ${int(BOX_COUNT)} boxes; intake ${ratio('relay-per-box', 'relay') ?? 'n/a'}`,
    );
  }

  const sinkless = ratio('relay', 'relay-no-sink');
  if (sinkless) lines.push(`- Cost of fan-out: relay with NATS / relay with no sink = ${sinkless}`);
  const inline = ratio('relay-inline', 'express');
  if (inline && relayOverB) {
    const cpu = (key: string, of: 'cpuMicrosPerRequest' | 'mainThreadMicrosPerRequest') => int(median((byKey.get(key) ?? []).map((m) => m[of])));
    lines.push(
      `- Fan-out thread: relay / (b) ${relayOverB} with the fan-out in its worker thread, ${inline} inline (target >= ${RELAY_OVER_B_TARGET}: ` +
        `${Number(relayOverB.split(' ')[0]) >= RELAY_OVER_B_TARGET ? 'met' : 'not met'}); CPU µs/2xx ${cpu('relay', 'cpuMicrosPerRequest')} worker vs ` +
        `${cpu('relay-inline', 'cpuMicrosPerRequest')} inline, of which the main thread ${cpu('relay', 'mainThreadMicrosPerRequest')} vs ` +
        `${cpu('relay-inline', 'mainThreadMicrosPerRequest')}` +
        (byKey.has('relay-no-sink') ? ` (${cpu('relay-no-sink', 'mainThreadMicrosPerRequest')} with no sink)` : ''),
    );
  }

  const withFanout = relayRuns.map((m) => m.fanout).filter((f): f is FanoutResult => f !== undefined);
  if (fanout || withFanout.length === 0) {
    lines.push(`- fan-out: ${fanout ?? 'not available'}`);
  } else {
    const drained = withFanout.filter((f) => f.drainMs !== null);
    if (drained.length < withFanout.length) {
      const late = withFanout.find((f) => f.drainMs === null) as FanoutResult;
      lines.push(`- fan-out: NATS had ${int(late.arrived)} of ${int(late.events)} events ${settings.fanoutTimeoutMs / 1000} s after the load`);
    }
    if (drained.length) {
      lines.push(
        `- fan-out: NATS held every event ${spread(drained.map((f) => f.drainMs as number), int)} ms after the last 200 ` +
          `(target <= 2000 ms); ${spread(drained.map((f) => f.eventsPerSecond as number), int)} events/s end to end`,
      );
    }
  }

  const grown = byKey.get('relay-grown') ?? [];
  if (grown.length > 0) {
    const full = median(rate('relay-grown'));
    const empties = rate('relay');
    const kept = empties.length ? full / median(empties) : undefined;
    const versus =
      kept === undefined ? '' : ` vs ${int(median(empties))}/s empty (${kept.toFixed(2)} x, target >= 0.75 x: ${kept >= 0.75 ? 'met' : 'not met'})`;
    lines.push(
      `- Growth: with ${int(settings.prefill)} deliveries (~300-byte bodies, 29 days) stored ${int(full)}/s${versus}, ` +
        `p99 ${spread(grown.map((m) => m.load.p99), ms)} ms; pre-fill took ${prefillSeconds.toFixed(0)} s`,
    );
    const drains = grown.flatMap((m) => (m.fanout?.drainMs != null ? [m.fanout.drainMs] : []));
    if (drains.length > 0) lines.push(`- Growth fan-out: drained ${spread(drains, int)} ms after the last 200`);
  }
  settings.compare.forEach((checkout, i) => {
    const compared = ratio('relay-grown', `relay-grown-compare-${i + 1}`);
    if (compared) lines.push(`- relay / relay from ${checkout}, ${int(settings.prefill)} stored: ${compared}`);
  });
  lines.push(...extraLines);
  lines.push(`- 1-minute load average before each measurement: ${measurements.map((m) => m.loadavg.toFixed(1)).join(', ')}`);
  lines.push(
    '',
    'CPU µs/2xx: user + system CPU time of the target process during the measurement, per 2xx answer (from',
    '/proc; threads included). On a shared machine it moves far less than throughput does. Machine CPU µs/2xx:',
    'busy CPU time of all cores (load generator, target, nats-server, anything else) per 2xx; with the cores',
    'saturated, throughput is about cores / machine CPU per 2xx; a process bound by its one thread shows CPU µs/2xx × rate ≈ 1 s/s.',
    '',
    `Reproduce: \`npm run bench\` (\`BENCH_ROUNDS=${settings.rounds} npm run bench\` for this file); \`BENCH_SECONDS\`, \`BENCH_PREFILL\`,`,
    '`BENCH_ONLY`, `BENCH_COMPARE`, `BENCH_PROFILE`: see bench/settings.ts.',
  );
  return lines.join('\n');
}
