import type { Page } from '../upstream/client.js';
import { CursorLoopError } from './errors.js';

/**
 * Every item of a paged list, following `nextCursor` until it is absent. A cursor seen before
 * (unchanged, or a cycle) would page forever: that is an error, not the end of the list.
 */
export async function readAllPages<T>(operation: string, fetchPage: (cursor?: string) => Promise<Page<T>>, beforeEachPage: () => Promise<void>): Promise<T[]> {
  const items: T[] = [];
  const followed = new Set<string>();
  let cursor: string | undefined;
  do {
    await beforeEachPage();
    const page = await fetchPage(cursor);
    items.push(...page.items);
    cursor = page.nextCursor;
    if (cursor !== undefined && followed.has(cursor)) throw new CursorLoopError(operation);
    if (cursor !== undefined) followed.add(cursor);
  } while (cursor !== undefined);
  return items;
}
