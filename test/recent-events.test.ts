import { afterEach, describe, expect, it, vi } from 'vitest';
import { recentEvents } from '../src/dispatch/recent-events.js';
import { eventJson } from '../src/sinks/failures.js';

const payload = (id: string, extra = '') => JSON.stringify({ id, type: 'box.ready', createdAt: '2026-11-25T10:00:00Z', data: { box: { id: `box_${id}` }, extra } });

describe('events shared by the sinks of one event', () => {
  afterEach(() => void vi.restoreAllMocks());

  it('builds each event once for every lane, and its JSON once', () => {
    const eventOf = recentEvents('urn:test');
    const first = eventOf('evt_1', payload('evt_1'), null);
    expect(eventOf('evt_1', payload('evt_1'), null)).toBe(first);
    expect(first).toMatchObject({ id: 'evt_1', source: 'urn:test', subject: 'box_evt_1' });
    expect(eventOf('evt_2', payload('evt_2'), null)).not.toBe(first);
    const stringify = vi.spyOn(JSON, 'stringify');
    const json = eventJson(first);
    expect(eventJson(first)).toBe(json);
    expect(stringify).toHaveBeenCalledTimes(1);
    expect(JSON.parse(json)).toEqual(first);
  });

  it('builds again for the same id with another payload or origin (an id is not trusted to name one event)', () => {
    const eventOf = recentEvents('urn:test');
    const first = eventOf('evt_1', payload('evt_1'), null);
    const changed = eventOf('evt_1', payload('evt_1', 'other'), null);
    expect(changed).not.toBe(first);
    expect(changed.data).toMatchObject({ extra: 'other' });
    const operator = eventOf('evt_1', payload('evt_1', 'other'), 'operator');
    expect(operator.source).toBe('urn:test/boxrelay');
  });

  it('keeps the 2,048 most recent: an older one is built again', () => {
    const eventOf = recentEvents('urn:test');
    const first = eventOf('evt_0', payload('evt_0'), null);
    for (let i = 1; i < 2048; i++) eventOf(`evt_${i}`, payload(`evt_${i}`), null);
    expect(eventOf('evt_0', payload('evt_0'), null)).toBe(first);
    eventOf('evt_2048', payload('evt_2048'), null);
    const again = eventOf('evt_0', payload('evt_0'), null);
    expect(again).not.toBe(first);
    expect(again).toEqual(first);
  });

  it('keeps at most 8 MiB of payloads: large events push the oldest out sooner', () => {
    const eventOf = recentEvents('urn:test');
    const large = (id: string) => payload(id, 'x'.repeat(3 * 1024 * 1024));
    const first = eventOf('evt_a', large('evt_a'), null);
    eventOf('evt_b', large('evt_b'), null);
    expect(eventOf('evt_a', large('evt_a'), null)).toBe(first);
    eventOf('evt_c', large('evt_c'), null);
    expect(eventOf('evt_a', large('evt_a'), null)).not.toBe(first);
  });
});
