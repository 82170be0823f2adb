import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

const ROOT = join(import.meta.dirname, '..', '..');

function newestSource(dir: string): number {
  let newest = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    newest = Math.max(newest, entry.isDirectory() ? newestSource(path) : entry.name.endsWith('.ts') ? statSync(path).mtimeMs : 0);
  }
  return newest;
}

/** Spawned tests run `bin/boxrelay.js`, which imports dist/: refuse a missing or stale build. */
export function requireBuild(): void {
  let built: number;
  try {
    built = statSync(join(ROOT, 'dist', 'src', 'cli', 'main.js')).mtimeMs;
  } catch {
    throw new Error('dist/ is missing: run `npm run build` (npm test does) before this test');
  }
  if (built < Math.max(newestSource(join(ROOT, 'src')), newestSource(join(ROOT, 'migrations')))) {
    throw new Error('dist/ is older than src/: run `npm run build` (npm test does) before this test');
  }
}

export const BIN = join(ROOT, 'bin', 'boxrelay.js');

export interface RelayProcess {
  child: ChildProcess;
  port: number;
  internalPort: number;
  lines: string[];
  exited: Promise<number | null>;
  /** Resolves with the first stdout JSON line (already seen or to come) that matches. */
  waitForLog(match: (entry: Record<string, unknown>) => boolean): Promise<Record<string, unknown>>;
}

/**
 * Runs `boxrelay serve` as users do (the built CLI, configured by env) and waits until it listens;
 * `bin`: another build's CLI (an earlier release, test/fixtures/release-a6e83e3/make.ts).
 * SIGTERM stops it at once unless the test sets BOXRELAY_SHUTDOWN_DELAY (test/graceful-shutdown.test.ts).
 */
export async function spawnRelay(env: Record<string, string>, bin = BIN): Promise<RelayProcess> {
  const child = spawn(process.execPath, [bin, 'serve'], {
    // Niceness 0: the suite's relays share one cgroup with every other test process, where a nicer
    // fan-out thread would yield to all of them, not only to its own relay (test/fanout-thread.test.ts sets it).
    env: {
      PATH: process.env.PATH,
      PORT: '0',
      BOXRELAY_INTERNAL_PORT: '0',
      HOST: '127.0.0.1',
      BOXRELAY_INTERNAL_HOST: '127.0.0.1',
      BOXRELAY_SHUTDOWN_DELAY: '0',
      BOXRELAY_FANOUT_NICENESS: '0',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const lines: string[] = [];
  const waiters: { match: (e: Record<string, unknown>) => boolean; resolve: (e: Record<string, unknown>) => void }[] = [];
  const parse = (line: string) => {
    try {
      return JSON.parse(line) as Record<string, unknown>;
    } catch {
      return { msg: line };
    }
  };
  for (const stream of [child.stdout, child.stderr]) {
    createInterface({ input: stream! }).on('line', (line) => {
      lines.push(line);
      const entry = parse(line);
      for (const w of [...waiters]) if (w.match(entry)) waiters.splice(waiters.indexOf(w), 1) && w.resolve(entry);
    });
  }
  const exited = once(child, 'exit').then(([code]) => code as number | null);
  const waitForLog: RelayProcess['waitForLog'] = (match) => {
    const seen = lines.map(parse).find(match);
    return seen ? Promise.resolve(seen) : new Promise((resolve) => waiters.push({ match, resolve }));
  };
  const listening = await Promise.race([
    waitForLog((e) => e.msg === 'boxrelay listening'),
    exited.then((code) => {
      throw new Error(`boxrelay exited with ${code} before listening:\n${lines.join('\n')}`);
    }),
  ]);
  return { child, port: listening.port as number, internalPort: listening.internalPort as number, lines, exited, waitForLog };
}

/** The relay's JSON log lines (stdout), without the plain-text lines `boxrelay: …` it writes to stderr for a person. */
export function logLines(relay: RelayProcess): string[] {
  return relay.lines.filter((line) => !line.startsWith('boxrelay: '));
}

/** Runs a CLI command to completion (of another build's CLI with `bin`). */
export async function runCli(args: string[], env: Record<string, string> = {}, bin = BIN): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, [bin, ...args], { env: { PATH: process.env.PATH, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const [code] = (await once(child, 'exit')) as [number | null];
  return { code, stdout, stderr };
}

/** After a test: a relay still running is killed and waited for. */
export async function killIfRunning(relay: RelayProcess | undefined): Promise<void> {
  if (relay && relay.child.exitCode === null) {
    relay.child.kill('SIGKILL');
    await relay.exited;
  }
}
