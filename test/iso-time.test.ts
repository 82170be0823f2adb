import { describe, expect, it } from 'vitest';
import { parseIsoWithZone } from '../src/iso-time.js';

describe('parseIsoWithZone', () => {
  const at = Date.UTC(2026, 10, 21, 10, 0, 0);

  it('accepts a date and time with Z, ±HH:MM or ±HHMM; seconds and a fraction are optional', () => {
    expect(parseIsoWithZone('2026-11-21T10:00:00Z')).toBe(at);
    expect(parseIsoWithZone('2026-11-21T10:00Z')).toBe(at);
    expect(parseIsoWithZone('2026-11-21T10:00:00.5Z')).toBe(at + 500);
    expect(parseIsoWithZone('2026-11-21T10:00:00.123456Z')).toBe(at + 123);
    expect(parseIsoWithZone('2026-11-21T10:00:00.1234567891Z')).toBe(at + 123);
    expect(parseIsoWithZone('2026-11-21T12:00:00+02:00')).toBe(at);
    expect(parseIsoWithZone('2026-11-21T12:00+0200')).toBe(at);
    expect(parseIsoWithZone('2026-11-21T06:30:00-03:30')).toBe(at);
    expect(parseIsoWithZone('2028-02-29T00:00:00Z')).toBe(Date.UTC(2028, 1, 29));
    expect(parseIsoWithZone('2000-02-29T00:00:00Z')).toBe(Date.UTC(2000, 1, 29));
  });

  it('refuses a time without a zone, a date alone, other notations and impossible values', () => {
    for (const text of [
      '2026-11-21T10:00:00', // no zone: the server's own would be guessed
      '2026-11-21',
      '2026-11-21 10:00:00Z',
      '2026-11-21t10:00:00z',
      '2026-11-21T10Z',
      '2026-11-21T10:00:00+02',
      '20261121T100000Z',
      '1795255200000',
      'yesterday',
      '',
      ' 2026-11-21T10:00:00Z',
      '2026-02-30T10:00:00Z',
      '2026-02-29T10:00:00Z',
      '1900-02-29T10:00:00Z',
      '2026-13-01T10:00:00Z',
      '2026-00-10T10:00:00Z',
      '2026-11-00T10:00:00Z',
      '2026-11-21T24:00:00Z',
      '2026-11-21T10:60:00Z',
      '2026-11-21T10:00:60Z',
      '2026-11-21T10:00:00+24:00',
      '2026-11-21T10:00:00+02:60',
    ]) {
      expect(parseIsoWithZone(text), text).toBeUndefined();
    }
  });
});
