import { execFile } from 'node:child_process';
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';

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

/** The env a spawned relay or CLI gets: only what the test sets, plus PATH. */
export function cleanEnv(env: Record<string, string>): NodeJS.ProcessEnv {
  return { PATH: process.env.PATH, ...env };
}

export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
}

export function runCli(args: string[], env: Record<string, string>): Promise<CliResult> {
  return new Promise((resolve) => {
    execFile(process.execPath, [BIN, ...args], { env: cleanEnv(env), timeout: 20_000 }, (error, stdout, stderr) => {
      resolve({ code: error ? (typeof error.code === 'number' ? error.code : 1) : 0, stdout, stderr });
    });
  });
}
