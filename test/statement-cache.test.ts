import BetterSqlite3 from 'better-sqlite3';
import { expect, it } from 'vitest';
import { statementCache } from '../src/store/engines/statement-cache.js';

const sqlite = new BetterSqlite3(':memory:');

it('prepares each SQL text once, and forgets the oldest past its capacity', () => {
  const prepare = statementCache(sqlite, 2);
  const one = prepare('SELECT 1 AS n');
  expect(prepare('SELECT 1 AS n')).toBe(one);
  expect(one.get()).toEqual({ n: 1 });
  prepare('SELECT 2 AS n');
  prepare('SELECT 3 AS n');
  expect(prepare('SELECT 1 AS n')).not.toBe(one);
  expect(prepare('SELECT 1 AS n').get()).toEqual({ n: 1 });
});
