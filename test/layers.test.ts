// The layout's rules as the imports keep them: storage knows no fan-out policy and no sink, and the
// message layer between threads knows neither storage nor the fan-out.
import { readFileSync, readdirSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';

const SRC = resolve(import.meta.dirname, '../src');

/** Every TypeScript file under a folder of src. */
function filesUnder(folder: string): string[] {
  return readdirSync(join(SRC, folder), { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile() && entry.name.endsWith('.ts'))
    .map((entry) => join(entry.parentPath, entry.name));
}

/** The src files a file imports (statically, dynamically or by re-export), as paths under src. */
function importsOf(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  const specifiers = [...text.matchAll(/(?:\bfrom\s*|\bimport\s*\(?\s*)'(\.{1,2}\/[^']+)'/g)].map((match) => match[1] as string);
  return specifiers.map((specifier) => relative(SRC, resolve(dirname(file), specifier)));
}

/** Each import of a file under `folder` that reaches into one of `forbidden`, as "file -> import". */
function crossings(folder: string, forbidden: string[]): string[] {
  return filesUnder(folder).flatMap((file) =>
    importsOf(file)
      .filter((target) => forbidden.some((other) => target === other || target.startsWith(`${other}/`)))
      .map((target) => `${relative(SRC, file)} -> ${target}`),
  );
}

describe('the layout', () => {
  it('src/store imports nothing from src/dispatch or src/sinks', () => {
    expect(filesUnder('store').length).toBeGreaterThan(50);
    expect(crossings('store', ['dispatch', 'sinks'])).toEqual([]);
  });

  it('src/threads imports nothing from src/store, src/dispatch or src/sinks', () => {
    expect(crossings('threads', ['store', 'dispatch', 'sinks'])).toEqual([]);
  });
});
