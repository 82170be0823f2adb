import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

const repoRoot = join(import.meta.dirname, '..');
const shared = join(repoRoot, '..', 'shared', 'relay-contract.md');

describe('docs/relay-contract.md', () => {
  // The repository carries the contract so its tests run from any clone; where the team's shared
  // folder sits beside the checkout (development machines, CI), the copy must be identical to it.
  it('is the shared contract, word for word, wherever the shared folder is beside the checkout', () => {
    const copy = readFileSync(join(repoRoot, 'docs', 'relay-contract.md'), 'utf8');
    expect(copy).toContain('# boxrelay: the external contract');
    if (existsSync(shared)) expect(copy).toBe(readFileSync(shared, 'utf8'));
  });
});
