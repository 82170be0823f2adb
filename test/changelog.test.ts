// CHANGELOG.md and the GET /admin/version example name the migrations the code has: read from
// migrations/index.ts, so a new migration without its line in the changelog fails here.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { migrations } from '../migrations/index.js';

const read = (file: string) => readFileSync(join(import.meta.dirname, '..', file), 'utf8');
const names = Object.keys(migrations).sort();
const newest = names.at(-1)!;
const changelog = read('CHANGELOG.md');
/**
 * What a database at the newest migration got from releases: the newest numbered release's section and,
 * above it, the changes merged since ("Unreleased"), where a migration added since that release is listed.
 */
const start = changelog.indexOf('\n## ');
const numbered = changelog.search(/\n## \d/);
const next = changelog.indexOf('\n## ', numbered + 1);
const release = changelog.slice(start, next === -1 ? undefined : next);

describe('the migrations in the docs', () => {
  it('the newest release of CHANGELOG.md, with what is unreleased, lists every migration, counts them, and names the newest as GET /admin/version reads it', () => {
    expect(names.filter((name) => !release.includes(`\`${name}\``))).toEqual([]);
    expect(release).toContain(`made by ${names.length} migrations`);
    expect(release).toContain(`"schema":"${newest}"`);
  });

  it('docs/operations.md’s GET /admin/version example names the newest migration', () => {
    expect(read('docs/operations.md')).toMatch(new RegExp(`\\{"ok":true,"version":"[^"]+","schema":"${newest}"`));
  });
});
