// `npm start`: builds only when dist/ is missing or older than what it is built from, so a start on
// a built, unchanged tree does not wait on the compiler (a supervisor's start-up probe would).
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const root = join(import.meta.dirname, '..');
const stamp = join(root, 'dist', '.build-stamp');
const inputs = ['src', 'migrations', 'bench', 'console', 'scripts/console-assets.mjs', 'tsconfig.json', 'package.json', 'package-lock.json'];

function newestMtime(path) {
  if (!existsSync(path)) return 0;
  const stat = statSync(path);
  if (!stat.isDirectory()) return stat.mtimeMs;
  let newest = stat.mtimeMs;
  for (const entry of readdirSync(path)) newest = Math.max(newest, newestMtime(join(path, entry)));
  return newest;
}

const builtAt = existsSync(stamp) ? statSync(stamp).mtimeMs : -1;
const sourcesAt = Math.max(...inputs.map((input) => newestMtime(join(root, input))));
if (builtAt < sourcesAt) {
  const startedAt = new Date();
  const build = spawnSync('npm', ['run', 'build'], { cwd: root, stdio: 'inherit' });
  if (build.status !== 0) process.exit(build.status ?? 1);
  // Stamped with the build's start: a source edited while it ran makes the next start build again.
  writeFileSync(stamp, '');
  utimesSync(stamp, startedAt, startedAt);
}
