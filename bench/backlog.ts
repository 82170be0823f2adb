/**
 * Backlog drains: the state a NATS outage leaves (events stored, their NATS
 * outbox rows pending), then the relay started with NATS up while new deliveries arrive at a fixed
 * rate; and a hook that answers at once draining a backlog at several `concurrency` settings.
 */
import { once } from 'node:events';
import { copyFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { join } from 'node:path';
import BetterSqlite3 from 'better-sqlite3';
import { PARTS, partOf } from '../src/store/log/position.js';
import { boxIdOf, eventBody, newEventId } from './deliveries.js';
import { runLoad, type LoadResult } from './load.js';
import { runNode } from './processes.js';
import { relay, type Context } from './targets.js';

export interface BacklogSettings {
  /** Events left pending by the outage (600,000 = 10 minutes at 1,000/s). */
  events: number;
  /** New deliveries a second during the drain. */
  rate: number;
  /** Pending rows of the hook drain, and the `concurrency` settings it is measured at. */
  hookEvents: number;
  hookConcurrency: number[];
  /** Longest wait for a drain. */
  timeoutMs: number;
}

interface NatsDrain {
    backlog: number;
    newAccepted: number;
    drainSeconds: number | null;
    eventsPerSecond: number | null;
    /** The relay's CPU time (all threads) per event on NATS, intake included: steadier than rates on a shared machine. */
    cpuMicrosPerEvent: number;
    load: LoadResult;
    /** The same load after the drain, nothing pending. */
    idle: LoadResult;
}

export interface BacklogFigures {
  nats?: NatsDrain;
  /** The same NATS drain by other builds (BENCH_COMPARE), for an A/B of a change. */
  compared: { checkout: string; drain: NatsDrain }[];
  hooks: { concurrency: number; events: number; seconds: number | null; eventsPerSecond: number | null; cpuMicrosPerEvent: number }[];
}

const DRAIN_TARGET = 10_000; // events/s: the drain rate the log design must keep (docs/performance.md)
const CONTROL_SECONDS = 10;
const P99_TARGET_MS = 50;
const HOOK_TARGET = 1000;
export const HOOK = 'bench-hook';

/**
 * A migrated SQLite file holding `count` stored events routed to `sink` that it never read: the log
 * past the sink's cursors (at the start), which is what an outage leaves, since the dispatcher reads
 * nothing for a sink that is down. Arrivals are spread over the outage, which ended just now.
 */
export async function backlogDatabase(ctx: Context, file: string, count: number, sink: string): Promise<void> {
  await runNode([join(ctx.root, 'bin/boxrelay.js'), 'migrate'], { BOXRELAY_DATABASE: file }, ctx.root);
  const db = new BetterSqlite3(file);
  try {
    db.pragma('journal_mode = OFF');
    db.pragma('synchronous = OFF');
    appendLog(db, 0, count, sink);
    const insertCursor = db.prepare('INSERT INTO log_cursors (sink, part, seq, updated_at) VALUES (?, ?, 0, ?)');
    for (const part of PARTS) insertCursor.run(sink, part, Date.now());
    db.pragma('journal_mode = WAL');
  } finally {
    db.close();
  }
}

/** Appends `count` deliveries routed to `sink` at the log's positions after `head`, received one a millisecond up to now. */
export function appendLog(db: BetterSqlite3.Database, head: number, count: number, sink: string): void {
  const insertDelivery = db.prepare(
    'INSERT INTO deliveries (id, type, box_id, created_at, received_at, attempt, payload, seq, part, sinks) VALUES (?, ?, ?, ?, ?, 1, ?, ?, ?, ?)',
  );
  const start = Date.now() - count; // 1,000 a second: one a millisecond.
  const chunk = db.transaction((from: number, to: number) => {
    for (let i = from; i < to; i++) {
      const at = start + i;
      const createdAt = new Date(at - 50).toISOString();
      const id = newEventId();
      const { type, body } = eventBody(id, head + i, createdAt);
      const boxId = boxIdOf((head + i) * 7919);
      insertDelivery.run(id, type, boxId, createdAt, at, body, head + i + 1, partOf(boxId), sink);
    }
  });
  for (let from = 0; from < count; from += 50_000) chunk(from, Math.min(count, from + 50_000));
}

let natsDrains = 0;

/** The NATS backlog drained while new deliveries arrive at `rate` a second. */
async function natsDrain(ctx: Context, settings: BacklogSettings, log: (line: string) => void, checkout?: string): Promise<NatsDrain> {
  // A file of its own per build: BENCH_COMPARE's builds each drain a fresh backlog.
  const file = join(ctx.tmp, `backlog-nats-${++natsDrains}.db`);
  log(`bench: backlog: storing ${settings.events} events with pending NATS rows`);
  await backlogDatabase(ctx, file, settings.events, 'nats');
  // From before the relay starts: its start-up counts toward the time to drain.
  const startedNs = process.hrtime.bigint();
  const running = await relay('backlog-nats', 'relay draining a NATS backlog', ctx, { logLevel: 'info', database: () => file, ...(checkout ? { checkout } : {}) }).start();
  try {
    const counter = running.fanout?.counter;
    if (!counter) throw new Error('the backlog bench needs NATS');
    log(`bench: backlog: draining ${settings.events} with new deliveries at ${settings.rate}/s`);
    const backlogDone = new AbortController();
    const watch = (async () => {
      while (!backlogDone.signal.aborted && (await counter.count()) < settings.events) await new Promise((r) => setTimeout(r, 250));
      backlogDone.abort();
    })();
    const load = await runLoad(running.server.port, {
      seconds: Math.ceil(settings.timeoutMs / 1000),
      connections: 50,
      rate: settings.rate,
      signal: backlogDone.signal,
    });
    backlogDone.abort();
    await watch;
    const { count, atNs } = await counter.until(settings.events + load.accepted, settings.timeoutMs);
    const drainSeconds = atNs === null ? null : Number(atNs - startedNs) / 1e9;
    const cpuMicrosPerEvent = (running.server.cpuSeconds() * 1e6) / Math.max(1, count);
    if (atNs === null) log(`bench: backlog: only ${count} of ${settings.events + load.accepted} arrived in time`);
    // The same load on the same machine with no backlog: how much of the latency is the drain's.
    const idle = await runLoad(running.server.port, { seconds: CONTROL_SECONDS, connections: 50, rate: settings.rate });
    return {
      idle,
      backlog: settings.events,
      newAccepted: load.accepted,
      drainSeconds,
      eventsPerSecond: drainSeconds === null ? null : (settings.events + load.accepted) / drainSeconds,
      cpuMicrosPerEvent,
      load,
    };
  } finally {
    await running.stop();
  }
}

/**
 * A hook answering 200 at once drains `hookEvents` pending rows, at one `concurrency`; `variant`
 * names the run and adds the relay's settings (`env`) or hook settings (`hook`: a transform).
 */
export async function hookDrain(
  ctx: Context,
  settings: Pick<BacklogSettings, 'hookEvents' | 'timeoutMs'>,
  concurrency: number,
  template: string,
  log: (line: string) => void,
  variant: { name: string; env?: Record<string, string>; hook?: Record<string, unknown> } = { name: 'default' },
) {
  let received = 0;
  let firstNs = 0n;
  let lastNs = 0n;
  let reached: () => void = () => {};
  const all = new Promise<void>((resolve) => (reached = resolve));
  const server = createServer((request, response) => {
    request.resume();
    request.on('end', () => {
      response.end();
      lastNs = process.hrtime.bigint();
      if (received === 0) firstNs = lastNs;
      if (++received === settings.hookEvents) reached();
    });
  });
  server.keepAliveTimeout = 60_000;
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as { port: number };
  const run = `${concurrency}-${variant.name}`;
  const hooksFile = join(ctx.tmp, `hooks-${run}.json`);
  writeFileSync(hooksFile, JSON.stringify([{ name: HOOK, url: `http://127.0.0.1:${port}/hook`, concurrency, ...variant.hook }]));
  const file = join(ctx.tmp, `backlog-hook-${run}.db`);
  copyFileSync(template, file);
  const running = await relay(`backlog-hook-${run}`, `hook drain, concurrency ${concurrency} (${variant.name})`, ctx, {
    logLevel: 'info',
    database: () => file,
    fanout: false,
    env: { BOXRELAY_HOOKS_FILE: hooksFile, ...variant.env },
  }).start();
  try {
    const timedOut = await Promise.race([all.then(() => false), new Promise<boolean>((r) => setTimeout(r, settings.timeoutMs, true).unref())]);
    // From the first request the hook saw: the relay's start-up is not the hook's drain.
    const seconds = timedOut ? null : Number(lastNs - firstNs) / 1e9;
    const cpuMicrosPerEvent = (running.server.cpuSeconds() * 1e6) / Math.max(1, received);
    log(`bench: hook drain at concurrency ${concurrency} (${variant.name}): ${seconds === null ? `timed out at ${received}` : `${Math.round(settings.hookEvents / seconds)}/s`}`);
    return { concurrency, events: settings.hookEvents, seconds, eventsPerSecond: seconds === null ? null : settings.hookEvents / seconds, cpuMicrosPerEvent };
  } finally {
    await running.stop();
    server.closeAllConnections();
    server.close();
  }
}

const int = (n: number | null | undefined): string => (n == null ? '–' : Math.round(n).toLocaleString('en'));
const met = (ok: boolean): string => (ok ? 'met' : 'not met');

export async function runBacklog(
  ctx: Context,
  settings: BacklogSettings,
  compare: string[],
  log: (line: string) => void,
): Promise<{ figures: BacklogFigures; lines: string[] }> {
  const figures: BacklogFigures = { compared: [], hooks: [] };
  if (ctx.natsUrl && settings.events > 0) {
    figures.nats = await natsDrain(ctx, settings, log);
    for (const checkout of compare) figures.compared.push({ checkout, drain: await natsDrain(ctx, settings, log, checkout) });
  } else log('bench: backlog: no NATS or no backlog; the NATS drain is skipped');
  if (settings.hookConcurrency.length > 0 && settings.hookEvents > 0) {
    const template = join(ctx.tmp, 'backlog-hook-template.db');
    log(`bench: backlog: storing ${settings.hookEvents} events with pending hook rows`);
    await backlogDatabase(ctx, template, settings.hookEvents, HOOK);
    for (const concurrency of settings.hookConcurrency) figures.hooks.push(await hookDrain(ctx, settings, concurrency, template, log));
  }

  const lines = ['## Backlog drains', ''];
  const nats = figures.nats;
  if (nats) {
    const drained = nats.eventsPerSecond !== null && nats.eventsPerSecond >= DRAIN_TARGET;
    const quick = nats.load.p99 < P99_TARGET_MS;
    lines.push(
      `NATS back after an outage: ${int(nats.backlog)} events pending (fresh due rows, as an outage leaves them), the relay started with ` +
        `NATS up, new deliveries paced at ${int(settings.rate)}/s (open loop over at most 50 connections, each latency from the request's due time; the first 2 s, the relay's coldest, not counted for any build) until the backlog has arrived.`,
      '',
      '| figure | value | target |',
      '|---|---:|---|',
      `| drain: events on NATS / s (backlog + new, from start to the last arrival) | ${int(nats.eventsPerSecond)} | >= ${int(DRAIN_TARGET)}: ${met(drained)} |`,
      `| relay CPU µs per event on NATS (start-up and intake included) | ${int(nats.cpuMicrosPerEvent)} | |`,
      `| time to drain | ${nats.drainSeconds === null ? 'timed out' : `${nats.drainSeconds.toFixed(1)} s`} | |`,
      `| new deliveries: 2xx (rate) | ${int(nats.newAccepted)} (${int(nats.load.acceptedPerSecond)}/s) | |`,
      `| new deliveries: p50 / p99 / max ms | ${nats.load.p50} / ${nats.load.p99} / ${nats.load.max} | p99 < ${P99_TARGET_MS}: ${met(quick)} |`,
      `| the same load for ${CONTROL_SECONDS} s once drained: p50 / p99 / max ms | ${nats.idle.p50} / ${nats.idle.p99} / ${nats.idle.max} | (control) |`,
      `| new deliveries: non-2xx / errors | ${int(nats.load.non2xx)} / ${int(nats.load.errors)}${nats.load.firstError ? ` (first: ${nats.load.firstError})` : ''} | 0 |`,
      '',
      ...figures.compared.map(
        ({ checkout, drain }) =>
          `- The same drain by ${checkout}: ${int(drain.eventsPerSecond)} events/s, ${int(drain.cpuMicrosPerEvent)} CPU µs per event, ` +
          `new deliveries p99 ${drain.load.p99} ms (max ${drain.load.max} ms), once drained p99 ${drain.idle.p99} ms`,
      ),
      ...(figures.compared.length ? [''] : []),
    );
  }
  if (figures.hooks.length > 0) {
    const best = figures.hooks.find((h) => (h.eventsPerSecond ?? 0) >= HOOK_TARGET);
    lines.push(
      `A hook answering 200 at once (local node:http server) drains ${int(settings.hookEvents)} pending rows; relay without NATS.`,
      '',
      '| hook concurrency | events/s | seconds | relay CPU µs/event |',
      '|---:|---:|---:|---:|',
      ...figures.hooks.map(
        (h) => `| ${h.concurrency} | ${int(h.eventsPerSecond)} | ${h.seconds === null ? 'timed out' : h.seconds.toFixed(1)} | ${int(h.cpuMicrosPerEvent)} |`,
      ),
      '',
      `Target >= ${int(HOOK_TARGET)}/s: ${best ? `met from concurrency ${best.concurrency}` : 'not met'}.`,
      '',
    );
  }
  return { figures, lines };
}
