/**
 * `npm run bench`: the relay exactly as users run it against two baselines in their own processes,
 * (a) bare node:http + HMAC and (b) a bare Express route + HMAC, under the same autocannon load, back
 * to back; then the fan-out to NATS and the relay on a database already holding a million deliveries.
 * Prints the report and writes it to bench/results.md. Settings: bench/settings.ts.
 */
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { runAccounts } from './accounts.js';
import { runAttemptsCost, runAttemptsPostgres } from './attempts-cost.js';
import { runBacklog } from './backlog.js';
import { runBacklogCount } from './backlog-count.js';
import { runTransformDrain } from './transform-drain.js';
import { runBuses } from './buses.js';
import { runPostgres } from './postgres.js';
import { runReplay } from './replay.js';
import { runLogReads } from './log-reads.js';
import { runIndexes } from './indexes.js';
import { runVolume } from './volume.js';
import { natsReachable } from './fanout.js';
import { startOtlpSink } from './otlp-sink.js';
import { runLoad, type LoadResult } from './load.js';
import { DAY_MS } from '../src/clock.js';
import { prefill } from './prefill.js';
import { runPruneUnderLoad } from './prune-under-load.js';
import { runStatsQuery } from './stats-query.js';
import { machineBusySeconds, runNode } from './processes.js';
import { renderReport, WORKER_THREADS, type FanoutResult, type Measurement } from './report.js';
import { readSettings } from './settings.js';
import { renderReceiveSteps, runReceiveSteps, type StepFigure } from './receive-steps.js';
import { baseline, relay, type Context, type Target } from './targets.js';

const settings = readSettings(process.argv.slice(2), process.env);
const root = fileURLToPath(new URL('../..', import.meta.url));
const tmp = mkdtempSync(join(tmpdir(), 'boxrelay-bench-'));
const log = (line: string) => process.stderr.write(`${line}\n`);

const natsUrl = (await natsReachable(settings.natsUrl)) ? settings.natsUrl : undefined;
if (!natsUrl) log(`bench: no NATS at ${settings.natsUrl}; the relay runs without it`);
if (settings.profileDir) mkdirSync(settings.profileDir, { recursive: true });
const ctx: Context = { root, tmp, natsUrl, profileDir: settings.profileDir };

let databases = 0;
const freshDatabase = () => join(tmp, `empty-${++databases}.db`);
const grownDatabase = join(tmp, 'grown.db');
const PREFILL_DAYS = 29;
let prefillSeconds = 0;

// Tracing on (every request sampled, exported over OTLP/HTTP protobuf) against the default, off.
const otlp = await startOtlpSink();

const targets: Target[] = [
  baseline('http', '(a) bare node:http + HMAC', 'bare-http.js', ctx),
  baseline('express', '(b) bare Express route + HMAC', 'bare-express.js', ctx),
  baseline('express-commit', '(c) (b) + group commit to one SQLite table (FULL)', 'express-commit.js', ctx),
  relay('relay', 'relay (LOG_LEVEL=info)', ctx, { logLevel: 'info', database: freshDatabase }),
  ...settings.compare.map((checkout, i) =>
    relay(`relay-compare-${i + 1}`, `relay from ${checkout}`, ctx, { logLevel: 'info', database: freshDatabase, checkout }),
  ),
  ...(settings.logCost ? [relay('relay-quiet', 'relay (LOG_LEVEL=warn)', ctx, { logLevel: 'warn', database: freshDatabase })] : []),
  relay('relay-traced', 'relay, tracing on (OTLP, all sampled)', ctx, {
    logLevel: 'info',
    database: freshDatabase,
    env: { OTEL_EXPORTER_OTLP_ENDPOINT: otlp.url, OTEL_EXPORTER_OTLP_PROTOCOL: 'http/protobuf', OTEL_TRACES_SAMPLER: 'always_on' },
  }),
  // What per-box ordering costs the NATS fan-out (the load spreads over thousands of boxes).
  ...(natsUrl
    ? [relay('relay-per-box', 'relay, NATS ordering per-box', ctx, { logLevel: 'info', database: freshDatabase, env: { BOXRELAY_NATS_ORDERING: 'per-box' } })]
    : []),
  // What an attempt row per event published costs (issue 51 item 7): the same NATS fan-out recording failed attempts only.
  ...(natsUrl
    ? [relay('relay-failed-attempts', 'relay, BOXRELAY_ATTEMPTS=failed (no row per success)', ctx, { logLevel: 'info', database: freshDatabase, env: { BOXRELAY_ATTEMPTS: 'failed' } })]
    : []),
  // The fan-out on the receiver's event loop instead of its worker thread.
  relay('relay-inline', 'relay, fan-out inline (BOXRELAY_FANOUT_THREAD=inline)', ctx, { logLevel: 'info', database: freshDatabase, env: { BOXRELAY_FANOUT_THREAD: 'inline' } }),
  // What the fan-out costs the receiver: the same relay with no sink configured (storage only).
  ...(natsUrl ? [relay('relay-no-sink', 'relay, no sink configured', ctx, { logLevel: 'info', database: freshDatabase, fanout: false })] : []),
].filter((t) => !settings.only || settings.only.includes(t.key));
// The same pre-filled file for every checkout: each run adds a few thousand rows to ten million.
const stored = settings.prefill.toLocaleString('en');
const growth: Target[] = [
  relay('relay-grown', `relay, ${stored} stored`, ctx, { logLevel: 'info', database: () => grownDatabase }),
  ...settings.compare.map((checkout, i) =>
    relay(`relay-grown-compare-${i + 1}`, `relay from ${checkout}, ${stored} stored`, ctx, {
      logLevel: 'info',
      database: () => grownDatabase,
      checkout,
    }),
  ),
].filter((t) => settings.prefill > 0 && (!settings.only || settings.only.includes(t.key)));

/** Whether the relay build fans out to NATS: decided once, by whether anything arrives. */
let fanoutWorks: boolean | undefined;

async function measure(target: Target, round: number): Promise<Measurement> {
  const load = { seconds: settings.seconds, connections: settings.connections };
  const running = await target.start();
  try {
    let before = 0;
    if (settings.warmup > 0) before = (await runLoad(running.server.port, { ...load, seconds: settings.warmup })).accepted;
    const fanout = running.fanout;
    if (fanout && fanoutWorks === undefined && before > 0) fanoutWorks = await fanout.counter.anyWithin(5000);
    // Start measuring with no warm-up backlog left in the outbox.
    if (fanout && fanoutWorks) await fanout.counter.until(before, settings.fanoutTimeoutMs);
    const loadavgBefore = loadavg()[0] as number;
    log(`bench: ${target.label}, round ${round + 1}: ${settings.seconds} s at ${settings.connections} connections`);
    const [cpuBefore, machineBefore, mainBefore] = [running.server.cpuSeconds(), machineBusySeconds(), running.server.mainThreadCpuSeconds()];
    const threadsBefore = WORKER_THREADS.map((name) => running.server.threadCpuSeconds(name));
    const result: LoadResult = await runLoad(running.server.port, load);
    const cpuSeconds = running.server.cpuSeconds() - cpuBefore;
    const mainThreadSeconds = running.server.mainThreadCpuSeconds() - mainBefore;
    const threadSeconds = WORKER_THREADS.map((name, i) => running.server.threadCpuSeconds(name) - threadsBefore[i]!);
    const machineSeconds = machineBusySeconds() - machineBefore;
    // With no warm-up, whether anything reaches NATS is only known after the measured load.
    if (fanout && fanoutWorks === undefined) fanoutWorks = result.accepted > 0 && (await fanout.counter.anyWithin(5000));
    let fanoutResult: FanoutResult | undefined;
    if (fanout && fanoutWorks) {
      const { count, atNs } = await fanout.counter.until(before + result.accepted, settings.fanoutTimeoutMs);
      fanoutResult = {
        events: result.accepted,
        arrived: count - before,
        drainMs: atNs === null ? null : Math.max(0, Number(atNs - result.lastOkNs) / 1e6),
        eventsPerSecond: atNs === null ? null : result.accepted / (Number(atNs - result.startedNs) / 1e9),
      };
    }
    return {
      key: target.key,
      label: target.label,
      round,
      load: result,
      cpuMicrosPerRequest: (cpuSeconds * 1e6) / Math.max(1, result.accepted),
      machineMicrosPerRequest: (machineSeconds * 1e6) / Math.max(1, result.accepted),
      mainThreadMicrosPerRequest: (mainThreadSeconds * 1e6) / Math.max(1, result.accepted),
      workerThreadMicrosPerRequest: Object.fromEntries(WORKER_THREADS.map((name, i) => [name, (threadSeconds[i]! * 1e6) / Math.max(1, result.accepted)])),
      fanout: fanoutResult,
      logBytes: running.server.stdoutBytes(),
      requests: before + result.accepted,
      loadavg: loadavgBefore,
    };
  } finally {
    await running.stop();
  }
}

const measurements: Measurement[] = [];
const measureAndKeep = async (target: Target, round: number): Promise<void> => {
  const m = await measure(target, round);
  measurements.push(m);
  log(`bench:   ${Math.round(m.load.acceptedPerSecond)}/s accepted, p99 ${m.load.p99} ms, non-2xx ${m.load.non2xx}`);
};
const startedAt = new Date();
let receiveSteps: StepFigure[] | undefined;
/** Report lines of the prune section, inside the main report. */
const extraLines: string[] = [];
/** Markdown of the sections measured by their own modules, after the main report. */
const sections: string[] = [];
const wanted = (key: string) => !settings.only || settings.only.includes(key);
try {
  // Each round starts one target further on, so no build is always the one measured first (or right
  // after the same other): a place in the order costs or gives the same to every target.
  for (let round = 0; round < settings.rounds; round++) {
    for (let i = 0; i < targets.length; i++) await measureAndKeep(targets[(i + round) % targets.length]!, round);
  }
  // The pre-filled file, made once for the growth runs and the stats query.
  let grown = false;
  const grow = async () => {
    if (grown) return;
    grown = true;
    const began = Date.now();
    if (settings.prefillCache && existsSync(settings.prefillCache)) {
      log(`bench: pre-filled deliveries copied from ${settings.prefillCache}`);
      copyFileSync(settings.prefillCache, grownDatabase);
    } else {
      log(`bench: pre-filling ${settings.prefill} deliveries`);
      await runNode([join(root, 'bin/boxrelay.js'), 'migrate'], { BOXRELAY_DATABASE: grownDatabase }, root);
      // ~30 days at 4 events/s ending a minute ago, inside the 30-day retention (its run 30 s after start deletes nothing).
      const end = Date.now() - 60_000;
      prefill(grownDatabase, [{ count: settings.prefill, from: end - PREFILL_DAYS * DAY_MS, to: end }]);
      if (settings.prefillCache) copyFileSync(grownDatabase, settings.prefillCache);
    }
    prefillSeconds = (Date.now() - began) / 1000;
    log(`bench: pre-filled in ${prefillSeconds.toFixed(1)} s (${Math.round(statSync(grownDatabase).size / 1e6)} MB)`);
  };
  if (growth.length > 0) {
    await grow();
    for (let round = 0; round < settings.rounds; round++) {
      for (const target of growth) await measureAndKeep(target, round);
    }
  }
  if (settings.prefill > 0 && wanted('stats')) {
    log('bench: the stats query of a day at 1-minute buckets');
    await grow();
    extraLines.push(...(await runStatsQuery(grownDatabase, stored)).lines);
  }
  if (settings.pruneLoad.rows > 0 && wanted('prune-load')) {
    extraLines.push(...(await runPruneUnderLoad(ctx, settings.pruneLoad, log)).lines);
  }
  if (wanted('receive-steps')) {
    log('bench: receive work, step by step');
    receiveSteps = await runReceiveSteps({ tmp });
  }
  if (wanted('backlog')) sections.push(...(await runBacklog(ctx, settings.backlog, settings.compare, log)).lines);
  if (wanted('backlog-count')) sections.push(...(await runBacklogCount(ctx, settings.backlog.events, log)).lines);
  if (wanted('attempts') && settings.backlog.hookEvents > 0) sections.push(...(await runAttemptsCost(ctx, settings.backlog, log)).lines);
  if (wanted('attempts-postgres')) sections.push(...(await runAttemptsPostgres(ctx, settings.postgresUrl, 30_000, log)).lines);
  if (wanted('transform-drain')) sections.push(...(await runTransformDrain(ctx, settings.transformDrain, log)).lines);
  if (wanted('bus-drain') || wanted('bus-beside-nats')) {
    sections.push(...(await runBuses(ctx, settings.buses, { drain: wanted('bus-drain'), besideNats: wanted('bus-beside-nats') }, log)).lines);
  }
  if (wanted('postgres')) {
    const { seconds, connections, fanoutTimeoutMs, postgresUrl: url } = settings;
    sections.push(...(await runPostgres(ctx, { url, seconds, connections, fanoutTimeoutMs }, log)).lines);
  }
  if (wanted('replay')) sections.push(...(await runReplay(ctx, settings.replay, log)).lines);
  if (wanted('log-reads')) sections.push(...(await runLogReads(ctx, settings.logReads, log)).lines);
  if (wanted('indexes')) sections.push(...(await runIndexes(ctx, settings.indexes, log)).lines);
  if (wanted('volume')) sections.push(...(await runVolume(ctx, settings.volume, settings.compare, log)).lines);
  if (wanted('accounts')) {
    const { seconds, warmup, connections, rounds } = settings;
    sections.push(...(await runAccounts(ctx, { seconds, warmup, connections, rounds }, log)).lines);
  }
} finally {
  rmSync(tmp, { recursive: true, force: true });
  await otlp.close();
}

const reportBody = renderReport({
  settings,
  measurements,
  startedAt,
  machine: { cpu: cpus()[0]?.model ?? 'unknown', cores: cpus().length, node: process.version },
  fanout: !natsUrl ? `no NATS server at ${settings.natsUrl}` : fanoutWorks === false ? 'not available' : undefined,
  prefillSeconds,
  extraLines,
});
const cpuOf = (key: string) => measurements.find((m) => m.key === key)?.cpuMicrosPerRequest;
if (receiveSteps) {
  sections.unshift(...renderReceiveSteps(receiveSteps, { relay: cpuOf('relay'), relayNoSink: cpuOf('relay-no-sink'), express: cpuOf('express') }), '');
}
const full = [reportBody, ...(sections.length ? ['', ...sections] : [])].join('\n');
process.stdout.write(`${full}\n`);
const resultsFile = settings.results ?? join(root, 'bench/results.md');
writeFileSync(resultsFile, `${full}\n`);
log(`bench: written to ${resultsFile}${settings.profileDir ? `; CPU profiles in ${settings.profileDir}` : ''}`);
