import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { referencePages } from './references.js';

// `npm run docs`: writes the reference pages from the code (run from dist/src/docs).
const root = join(import.meta.dirname, '..', '..', '..');
for (const [path, text] of Object.entries(await referencePages())) {
  mkdirSync(dirname(join(root, path)), { recursive: true });
  writeFileSync(join(root, path), text);
  console.log(`wrote ${path}`);
}
