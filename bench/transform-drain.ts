/**
 * What a transform costs a hook (issue 32): the same backlog drained by the same hook answering 200
 * at once, with the body made by a PagerDuty-shaped transform and without one (the CloudEvent),
 * in pairs of alternating order (this machine drifts between runs more than the target's margin).
 */
import { join } from 'node:path';
import { HOOK, backlogDatabase, hookDrain } from './backlog.js';
import type { Context } from './targets.js';

export interface TransformDrainSettings {
  /** Pending rows each drain sends. */
  events: number;
  /** Pairs of drains, without and with the transform, in alternating order. */
  rounds: number;
  concurrency: number;
  timeoutMs: number;
}

/** Events API v2 for every event, so both drains send as many requests: a trigger per error, a resolve otherwise. */
const PAGERDUTY_SHAPED = `event.type == "box.error" ? {
  "routing_key": "R0123456789abcdef0123456789abcde",
  "event_action": "trigger",
  "dedup_key": "boxrelay-" + event.data.box.id,
  "payload": {
    "summary": truncate("box " + (has(event.data.box.name) ? event.data.box.name : event.data.box.id) + " entered error", 1024),
    "source": event.source,
    "severity": "error",
    "custom_details": event
  }
} : {
  "routing_key": "R0123456789abcdef0123456789abcde",
  "event_action": "resolve",
  "dedup_key": "boxrelay-" + event.data.box.id
}`;

const TARGET = 0.8;

export async function runTransformDrain(ctx: Context, settings: TransformDrainSettings, log: (line: string) => void): Promise<{ ratio: number | null; lines: string[] }> {
  const template = join(ctx.tmp, 'transform-drain-template.db');
  log(`bench: transform drain: storing ${settings.events} events with pending hook rows`);
  await backlogDatabase(ctx, template, settings.events, HOOK);
  const drain = { hookEvents: settings.events, timeoutMs: settings.timeoutMs };
  const runs: { plain: number[]; transformed: number[]; plainCpu: number[]; transformedCpu: number[] } = { plain: [], transformed: [], plainCpu: [], transformedCpu: [] };
  const run = (transform: boolean) =>
    hookDrain(ctx, drain, settings.concurrency, template, log, transform ? { name: 'transformed', hook: { transform: PAGERDUTY_SHAPED } } : { name: 'plain' });
  for (let round = 0; round < settings.rounds; round++) {
    // ABBA: each pair in the other order, so a drift of the machine weighs on both alike.
    const first = await run(round % 2 === 1);
    const second = await run(round % 2 === 0);
    const [plain, transformed] = round % 2 === 1 ? [second, first] : [first, second];
    if (plain.eventsPerSecond === null || transformed.eventsPerSecond === null) continue;
    runs.plain.push(plain.eventsPerSecond);
    runs.transformed.push(transformed.eventsPerSecond);
    runs.plainCpu.push(plain.cpuMicrosPerEvent);
    runs.transformedCpu.push(transformed.cpuMicrosPerEvent);
  }
  const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);
  const ratio = runs.plain.length === 0 ? null : sum(runs.transformed) / sum(runs.plain);
  const mean = (xs: number[]) => (xs.length === 0 ? null : sum(xs) / xs.length);
  const [plainCpu, transformedCpu] = [mean(runs.plainCpu), mean(runs.transformedCpu)];
  const cpuRatio = plainCpu === null || transformedCpu === null ? null : plainCpu / transformedCpu;
  const int = (n: number | null) => (n === null ? '–' : Math.round(n).toLocaleString('en'));
  const lines = [
    '## Hook transform drain',
    '',
    `The same hook (answering 200 at once, concurrency ${settings.concurrency}) drains ${int(settings.events)} pending rows with its body made by a ` +
      `PagerDuty-shaped transform (Events API v2, the CloudEvent in custom_details) and without one; ${settings.rounds} pairs in alternating order (ABBA), relay without NATS.`,
    '',
    '| hook | events/s (each pair) | mean events/s | relay CPU µs/event (mean) |',
    '|---|---|---:|---:|',
    `| CloudEvent body | ${runs.plain.map(int).join(', ')} | ${int(mean(runs.plain))} | ${int(mean(runs.plainCpu))} |`,
    `| PagerDuty-shaped transform | ${runs.transformed.map(int).join(', ')} | ${int(mean(runs.transformed))} | ${int(mean(runs.transformedCpu))} |`,
    '',
    `Ratio (transformed / plain events/s, over all pairs): ${ratio === null ? 'not measured' : ratio.toFixed(2)}; target >= ${TARGET}: ${ratio !== null && ratio >= TARGET ? 'met' : 'not met'}. ` +
      `Relay CPU per event, plain / transformed (the steadier figure on a shared machine): ${cpuRatio === null ? 'not measured' : cpuRatio.toFixed(2)}.`,
    '',
  ];
  log(`bench: transform drain ratio ${ratio === null ? 'not measured' : ratio.toFixed(2)} (events/s), ${cpuRatio === null ? '–' : cpuRatio.toFixed(2)} (CPU per event)`);
  return { ratio, lines };
}
