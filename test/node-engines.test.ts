// Node versions: the image runs the current LTS (the Dockerfile's node:<major>), and the oldest
// Node that package.json's engines accepts (Node 20, past its end of life, kept working) is one
// that every locked package accepts too, so `npm ci` warns EBADENGINE for none.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import semver from 'semver';
import { describe, expect, it } from 'vitest';

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const read = (file: string) => fs.readFileSync(path.join(repoRoot, file), 'utf8');
const pkg = JSON.parse(read('package.json')) as { engines: { node: string } };
const lock = JSON.parse(read('package-lock.json')) as { packages: Record<string, { engines?: { node?: string } | string[] }> };
const imageMajor = Number(/^ARG NODE_IMAGE=node:(\d+)-/m.exec(read('Dockerfile'))![1]);

describe('Node versions', () => {
  it('engines accepts Node 20 and the image runs Node 24 (the current LTS)', () => {
    const oldest = semver.minVersion(pkg.engines.node)!;
    expect(oldest.major).toBe(20);
    expect(imageMajor).toBe(24);
    expect(semver.satisfies(`${imageMajor}.0.0`, pkg.engines.node)).toBe(true);
  });

  it("every locked package accepts the oldest Node of engines and the image's Node", () => {
    const oldest = semver.minVersion(pkg.engines.node)!.version;
    // Node 24's first LTS release: the image's tag follows the line's newest release.
    const image = `${imageMajor}.11.0`;
    const refused: string[] = [];
    for (const [name, meta] of Object.entries(lock.packages)) {
      // Old packages give engines as a list of strings; npm ignores that form.
      const range = Array.isArray(meta.engines) ? undefined : meta.engines?.node;
      if (range === undefined) continue;
      for (const version of [oldest, image]) {
        if (!semver.satisfies(version, range)) refused.push(`${name} (${range}) refuses Node ${version}`);
      }
    }
    expect(refused).toEqual([]);
  });
});
