import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { describe, expect, it } from 'vitest';

const repoRoot = join(import.meta.dirname, '..');

/**
 * The team's shared contract: `shared/relay-contract.md` in the nearest folder above the checkout
 * that has one (beside the main checkout, or above a worktree of it), or where
 * BOXRELAY_SHARED_CONTRACT points.
 */
function sharedContract(): string | undefined {
  if (process.env.BOXRELAY_SHARED_CONTRACT) return process.env.BOXRELAY_SHARED_CONTRACT;
  for (let dir = dirname(repoRoot); ; dir = dirname(dir)) {
    const candidate = join(dir, 'shared', 'relay-contract.md');
    if (existsSync(candidate)) return candidate;
    if (dirname(dir) === dir) return undefined;
  }
}

describe('docs/relay-contract.md', () => {
  // The repository carries the contract so that readers of a clone have it; the copy must be the
  // shared contract word for word, and a run that cannot compare them fails rather than passes.
  it('is the shared contract, word for word', () => {
    const shared = sharedContract();
    expect(shared, 'no shared/relay-contract.md above the checkout: set BOXRELAY_SHARED_CONTRACT to the shared contract').toBeDefined();
    const copy = readFileSync(join(repoRoot, 'docs', 'relay-contract.md'), 'utf8');
    expect(copy).toContain('# boxrelay: the external contract');
    expect(copy).toBe(readFileSync(shared!, 'utf8'));
  });
});
