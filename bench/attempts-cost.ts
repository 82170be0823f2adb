/**
 * What recording every delivery attempt costs (issue 33): the hook backlog drain with
 * `BOXRELAY_ATTEMPTS=all` against the same with `failed` (the failures only: none here), in
 * alternating runs (this machine drifts more between runs than the difference measured).
 */
import { join } from 'node:path';
import { openDatabase } from '../src/store/engines/database.js';
import type { NewAttempt } from '../src/store/attempts/attempt-rows.js';
import { createAttemptLog } from '../src/store/attempts/record-attempts.js';
import { HOOK, backlogDatabase, hookDrain, type BacklogSettings } from './backlog.js';
import { scratchDatabase } from './postgres.js';
import { cpuSecondsOfNamed } from './processes.js';
import type { Context } from './targets.js';

const RATIO_TARGET = 0.85;
const PAIRS = 2;

export async function runAttemptsCost(ctx: Context, settings: BacklogSettings, log: (line: string) => void): Promise<{ lines: string[] }> {
  const concurrency = Math.max(...settings.hookConcurrency, 1);
  const template = join(ctx.tmp, 'attempts-cost-template.db');
  log(`bench: attempts: storing ${settings.hookEvents} events with pending hook rows`);
  await backlogDatabase(ctx, template, settings.hookEvents, HOOK);
  const rates: Record<'all' | 'failed', (number | null)[]> = { all: [], failed: [] };
  const cpu: Record<'all' | 'failed', number[]> = { all: [], failed: [] };
  for (let pair = 0; pair < PAIRS; pair++) {
    for (const mode of pair % 2 === 0 ? (['failed', 'all'] as const) : (['all', 'failed'] as const)) {
      const drain = await hookDrain(ctx, settings, concurrency, template, log, { name: `attempts-${mode}-${pair}`, env: { BOXRELAY_ATTEMPTS: mode } });
      rates[mode].push(drain.eventsPerSecond);
      cpu[mode].push(drain.cpuMicrosPerEvent);
    }
  }
  const mean = (values: (number | null)[]) => (values.some((v) => v === null) ? null : values.reduce<number>((sum, v) => sum + (v as number), 0) / values.length);
  const [all, failed] = [mean(rates.all), mean(rates.failed)];
  const ratio = all === null || failed === null ? null : all / failed;
  // The relay's CPU per event: steadier than rates on a shared machine; failed / all reads like a rate ratio.
  const [cpuAll, cpuFailed] = [mean(cpu.all) as number, mean(cpu.failed) as number];
  const int = (n: number | null) => (n === null ? 'timed out' : Math.round(n).toLocaleString('en'));
  return {
    lines: [
      '## Recording delivery attempts',
      '',
      `The hook backlog drain (${settings.hookEvents.toLocaleString('en')} pending, concurrency ${concurrency}, a hook answering 200 at once) ` +
        `with every attempt recorded against failures only, ${PAIRS} alternating runs of each.`,
      '',
      '| BOXRELAY_ATTEMPTS | events/s (each run) | mean | relay CPU µs/event (each run) | mean |',
      '|---|---:|---:|---:|---:|',
      `| all | ${rates.all.map(int).join(', ')} | ${int(all)} | ${cpu.all.map(int).join(', ')} | ${int(cpuAll)} |`,
      `| failed | ${rates.failed.map(int).join(', ')} | ${int(failed)} | ${cpu.failed.map(int).join(', ')} | ${int(cpuFailed)} |`,
      '',
      `events/s, all / failed: ${ratio === null ? '–' : ratio.toFixed(2)} (target >= ${RATIO_TARGET}: ${ratio !== null && ratio >= RATIO_TARGET ? 'met' : 'not met'}); ` +
        `CPU per event, failed / all: ${(cpuFailed / cpuAll).toFixed(2)}.`,
      '',
    ],
  };
}

/** Batches as the recorder writes them at about 1,500 successes a second (one every 100 ms). */
const POSTGRES_BATCH = 150;

/**
 * What writing down successes costs on PostgreSQL, by itself: `rows` successful attempts recorded
 * in batches through the attempt log, the relay's and the server's CPU per row.
 */
export async function runAttemptsPostgres(ctx: Context, serverUrl: string, rows: number, log: (line: string) => void): Promise<{ lines: string[] }> {
  const scratch = await scratchDatabase(ctx, serverUrl);
  const database = openDatabase({ url: scratch.url });
  try {
    const attempts = createAttemptLog(database);
    const success = (i: number): NewAttempt => ({
      eventId: `evt_${i}`,
      sink: 'nats',
      at: Date.now(),
      durationMs: 1,
      outcome: 'delivered',
      status: null,
      error: null,
      answered: true,
      request: null,
      response: null,
    });
    const record = async (from: number, count: number) => {
      for (let i = from; i < from + count; i += POSTGRES_BATCH) {
        await attempts.recordDelivered(Array.from({ length: Math.min(POSTGRES_BATCH, from + count - i) }, (_, j) => success(i + j)));
      }
    };
    log(`bench: attempts on PostgreSQL: ${rows} successes in batches of ${POSTGRES_BATCH}`);
    await record(rows, 2000);
    const [relayBefore, serverBefore, began] = [process.cpuUsage(), cpuSecondsOfNamed('postgres'), performance.now()];
    await record(0, rows);
    const relay = process.cpuUsage(relayBefore);
    const serverMicros = (cpuSecondsOfNamed('postgres') - serverBefore) * 1e6;
    const seconds = (performance.now() - began) / 1000;
    const per = (micros: number) => (micros / rows).toFixed(1);
    return {
      lines: [
        '## Recording successes on PostgreSQL',
        '',
        `${rows.toLocaleString('en')} successful attempts written through the attempt log in batches of ${POSTGRES_BATCH}:`,
        '',
        '| rows/s | relay CPU µs/row | PostgreSQL server CPU µs/row |',
        '|---:|---:|---:|',
        `| ${Math.round(rows / seconds).toLocaleString('en')} | ${per(relay.user + relay.system)} | ${per(serverMicros)} |`,
        '',
      ],
    };
  } finally {
    await database.close();
    await scratch.drop();
  }
}
