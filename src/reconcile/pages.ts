import type { Page } from '../upstream/client.js';
import { CursorLoopError } from './errors.js';

/**
 * Hands each page of a paged list to `onPage`, following `nextCursor` until it is absent, so a long
 * history is never held whole. A cursor seen before (unchanged, or a cycle) would page forever: that
 * is an error, not the end of the list. `beforeEachPage` may refuse the next page (a run's bounds).
 */
export async function forEachPage<T>(
  operation: string,
  fetchPage: (cursor?: string) => Promise<Page<T>>,
  beforeEachPage: () => Promise<void>,
  onPage: (items: T[]) => void,
): Promise<void> {
  const followed = new Set<string>();
  let cursor: string | undefined;
  do {
    await beforeEachPage();
    const page = await fetchPage(cursor);
    onPage(page.items);
    cursor = page.nextCursor;
    if (cursor !== undefined && followed.has(cursor)) throw new CursorLoopError(operation);
    if (cursor !== undefined) followed.add(cursor);
  } while (cursor !== undefined);
}
