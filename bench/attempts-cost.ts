/**
 * What recording every delivery attempt costs (issue 33): the hook backlog drain with
 * `BOXRELAY_ATTEMPTS=all` against the same with `failed` (the failures only: none here), in
 * alternating runs (this machine drifts more between runs than the difference measured).
 */
import { join } from 'node:path';
import { HOOK, backlogDatabase, hookDrain, type BacklogSettings } from './backlog.js';
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
