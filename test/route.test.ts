import { describe, expect, it } from 'vitest';
import { createSinkRouter, globMatcher } from '../src/sinks/route.js';

describe('event globs', () => {
  const cases: [glob: string, type: string, matches: boolean][] = [
    ['box.error', 'box.error', true],
    ['box.error', 'box.errors', false],
    ['box.error', 'Box.error', false],
    ['box.*', 'box.ready', true],
    ['box.*', 'box.', true],
    ['box.*', 'box', false],
    ['box.*', 'box.a.b.c', true],
    ['*', '', true],
    ['*', 'anything.at.all', true],
    ['**', 'x', true],
    ['*.error', 'box.error', true],
    ['*.error', 'error', false],
    ['*.*.error', 'a.b.error', true],
    ['*.*.error', 'a.error', false],
    ['*.*.error', 'a..error', true],
    ['ab*ba', 'aba', false],
    ['ab*ba', 'abba', true],
    ['a*b*c', 'a-c-b', false],
    ['a*b*c', 'axbyc', true],
    ['a*a', 'aaa', true],
    // Everything but `*` is literal: no regular-expression or other glob syntax.
    ['box.?', 'box.x', false],
    ['box.?', 'box.?', true],
    ['box.[ab]', 'box.a', false],
    ['(a|b)', '(a|b)', true],
    ['box.ready', 'boxXready', false],
  ];
  for (const [glob, type, matches] of cases) {
    it(`${JSON.stringify(glob)} ${matches ? 'matches' : 'does not match'} ${JSON.stringify(type)}`, () => {
      expect(globMatcher(glob)(type)).toBe(matches);
    });
  }

  // Both took quadratic time or worse as `.*` regular expressions (seconds to forever at this size).
  it('answers *.*.error against a 16 KB type', () => {
    expect(globMatcher('*.*.error')('.'.repeat(16 * 1024))).toBe(false);
    expect(globMatcher('*.*.error')(`${'.'.repeat(16 * 1024)}error`)).toBe(true);
  });

  it('answers a glob of many stars against 16,000 characters that nearly match', () => {
    expect(globMatcher('*a*a*a*a*a*a*a*b')('a'.repeat(16_000))).toBe(false);
    expect(globMatcher('*a*a*a*a*a*a*a*b')(`${'a'.repeat(16_000)}b`)).toBe(true);
  });

  it('routes an event type to every configured bus and to each hook with a matching glob', () => {
    const route = createSinkRouter({
      buses: ['nats', 'amqp'],
      source: 'sandbox',
      hooks: [
        { name: 'errors', events: ['*.error'] },
        { name: 'boxes', events: ['account.*', 'box.*'] },
      ] as Parameters<typeof createSinkRouter>[0]['hooks'],
    });
    expect(route('box.error')).toEqual(['nats', 'amqp', 'errors', 'boxes']);
    expect(route('box.ready')).toEqual(['nats', 'amqp', 'boxes']);
    expect(route('other')).toEqual(['nats', 'amqp']);
  });
});
