/**
 * Several accounts (contract section 21, issue 52): the same load at one named account's endpoint
 * (`POST /webhooks/<name>`, signed with its secret) against a relay configured with 1 account and
 * one with 10, back to back in one run, so what the other accounts cost the one receiving shows
 * beside each other. `only`: `accounts`.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { runLoad, type LoadResult } from './load.js';
import { relay, type Context } from './targets.js';

export interface AccountsSettings {
  seconds: number;
  warmup: number;
  connections: number;
  rounds: number;
}

interface AccountsRun {
  accounts: number;
  round: number;
  load: LoadResult;
  cpuMicrosPerRequest: number;
}

const COUNTS = [1, 10];

/** A distinct secret per account (one secret given to two accounts stops the start). */
const secretOf = (i: number): string => `whsec_${Buffer.from(`bench-account-${String(i).padStart(2, '0')}-signing-secret`).toString('base64')}`;

/** An accounts file of `count` accounts, `acct-0` … ; the load goes to the last one. */
function accountsFile(ctx: Context, count: number): string {
  const file = join(ctx.tmp, `accounts-${count}.json`);
  writeFileSync(file, JSON.stringify(Array.from({ length: count }, (_, i) => ({ name: `acct-${i}`, secrets: [secretOf(i)] }))));
  return file;
}

async function measure(ctx: Context, count: number, round: number, settings: AccountsSettings, log: (line: string) => void): Promise<AccountsRun> {
  const target = relay(`accounts-${count}`, `relay with ${count} account(s)`, ctx, {
    logLevel: 'info',
    database: () => join(ctx.tmp, `accounts-${count}-${round}.db`),
    env: { BOXRELAY_ACCOUNTS_FILE: accountsFile(ctx, count) },
  });
  const running = await target.start();
  try {
    const endpoint = { path: `/webhooks/acct-${count - 1}`, secret: secretOf(count - 1) };
    const load = { seconds: settings.seconds, connections: settings.connections, endpoint };
    if (settings.warmup > 0) await runLoad(running.server.port, { ...load, seconds: settings.warmup });
    log(`bench: ${target.label}, round ${round + 1}: ${settings.seconds} s at ${settings.connections} connections to ${endpoint.path}`);
    const cpuBefore = running.server.cpuSeconds();
    const result = await runLoad(running.server.port, load);
    const cpuMicrosPerRequest = ((running.server.cpuSeconds() - cpuBefore) * 1e6) / Math.max(1, result.accepted);
    log(`bench:   ${Math.round(result.acceptedPerSecond)}/s accepted, p99 ${result.p99} ms, CPU ${Math.round(cpuMicrosPerRequest)} µs per 2xx, non-2xx ${result.non2xx}`);
    return { accounts: count, round, load: result, cpuMicrosPerRequest };
  } finally {
    await running.stop();
  }
}

/**
 * Rounds alternate which relay goes first (1 then 10, 10 then 1, …), so whatever the second of a pair
 * inherits from the first (a warm page cache, a machine still busy with the last stop) falls on both.
 * The report gives each round's figures and their medians.
 */
export async function runAccounts(ctx: Context, settings: AccountsSettings, log: (line: string) => void): Promise<{ lines: string[] }> {
  const runs: AccountsRun[] = [];
  for (let round = 0; round < settings.rounds; round++) {
    const order = round % 2 === 0 ? COUNTS : [...COUNTS].reverse();
    for (const count of order) runs.push(await measure(ctx, count, round, settings, log));
  }
  const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] ?? 0;
  const rows = COUNTS.map((count) => {
    const of = runs.filter((run) => run.accounts === count);
    return {
      count,
      perSecond: median(of.map((run) => run.load.acceptedPerSecond)),
      p50: median(of.map((run) => run.load.p50)),
      p99: median(of.map((run) => run.load.p99)),
      cpu: median(of.map((run) => run.cpuMicrosPerRequest)),
      non2xx: of.reduce((sum, run) => sum + run.load.non2xx + run.load.errors, 0),
    };
  });
  const [one, ten] = rows as [(typeof rows)[number], (typeof rows)[number]];
  // Rounds differ more from each other than the two relays of one round do: each round's 10-to-1
  // ratio, then their median, is the figure that compares like with like.
  const pairRatios = (of: (run: AccountsRun) => number) =>
    Array.from({ length: settings.rounds }, (_, round) => {
      const [a, b] = COUNTS.map((count) => runs.find((run) => run.round === round && run.accounts === count)!);
      return of(b!) / Math.max(Number.EPSILON, of(a!));
    });
  const percent = (ratio: number) => `${((ratio - 1) * 100).toFixed(1)} %`;
  const cpuRatios = pairRatios((run) => run.cpuMicrosPerRequest);
  const rateRatios = pairRatios((run) => run.load.acceptedPerSecond);
  return {
    lines: [
      '## Several accounts: 1 against 10 (contract section 21)',
      '',
      `The same load at one named account's endpoint (\`POST /webhooks/<name>\`, its own secret), ${settings.seconds} s at ${settings.connections} connections ` +
        `after ${settings.warmup} s of warm-up, on a relay configured with 1 account and on one with 10, back to back, the first of each pair alternating (${settings.rounds} round(s), medians).`,
      '',
      '| relay | 2xx/s | p50 ms | p99 ms | CPU µs per 2xx | non-2xx and errors |',
      '| --- | ---: | ---: | ---: | ---: | ---: |',
      ...rows.map((row) => `| ${row.count} account${row.count === 1 ? '' : 's'} | ${Math.round(row.perSecond)} | ${row.p50} | ${row.p99} | ${Math.round(row.cpu)} | ${row.non2xx} |`),
      '',
      `10 accounts against 1, medians: ${percent(ten.perSecond / Math.max(1, one.perSecond))} 2xx/s, ${percent(ten.cpu / Math.max(1, one.cpu))} CPU per 2xx.`,
      `Round by round (10 against 1 in the same round): CPU per 2xx ${cpuRatios.map(percent).join(', ')} (median ${percent(median(cpuRatios))}); ` +
        `2xx/s ${rateRatios.map(percent).join(', ')} (median ${percent(median(rateRatios))}).`,
    ],
  };
}
