import type { Request } from 'express';
import { InvalidRequestError } from '../../errors.js';
import { queryParam } from './operation.js';

export interface Page {
  limit: number;
  /** The decoded cursor: the sort key of the last item already returned. */
  after: string | number | undefined;
}

/** `limit` (1..200, default 50) and an opaque `cursor` from the previous page's `nextCursor`. */
export function readPage(req: Request): Page {
  const { limit, cursor } = req.query;
  let parsedLimit = 50;
  if (limit !== undefined) {
    if (typeof limit !== 'string' || !/^\d+$/.test(limit) || Number(limit) < 1 || Number(limit) > 200) {
      throw new InvalidRequestError('limit must be a whole number from 1 to 200');
    }
    parsedLimit = Number(limit);
  }
  if (cursor === undefined || cursor === '') return { limit: parsedLimit, after: undefined };
  try {
    const decoded = JSON.parse(Buffer.from(String(cursor), 'base64url').toString('utf8')) as unknown;
    if (typeof decoded === 'string' || typeof decoded === 'number') return { limit: parsedLimit, after: decoded };
  } catch {
    // fall through to the refusal below
  }
  throw new InvalidRequestError('cursor is not one this server issued');
}

/** Fetch `limit + 1` rows; the extra one only tells whether there is a next page. */
export function pageOf<T>(rows: T[], page: Page, keyOf: (row: T) => string | number): { items: T[]; nextCursor: string | null } {
  const items = rows.slice(0, page.limit);
  const last = items.at(-1);
  const nextCursor =
    rows.length > page.limit && last !== undefined
      ? Buffer.from(JSON.stringify(keyOf(last)), 'utf8').toString('base64url')
      : null;
  return { items, nextCursor };
}

/** An optional query string value, refused when repeated or not a string. */
export function queryText(req: Request, name: string): string | undefined {
  const value = req.query[name];
  if (value === undefined || value === '') return undefined;
  if (typeof value !== 'string') throw new InvalidRequestError(`${name} must be given once`);
  return value;
}

/** The query parameters of every list. */
export const PAGE_QUERY = {
  limit: queryParam('How many items, 1 to 200 (default 50).'),
  cursor: queryParam('The `nextCursor` of the previous page.'),
};
