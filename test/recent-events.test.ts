import { describe, expect, it } from 'vitest';
import { recentEvents } from '../src/dispatch/recent-events.js';
import { eventJson } from '../src/sinks/failures.js';

const payload = (id: string) => JSON.stringify({ id, type: 'box.ready', createdAt: '2026-11-25T10:00:00Z', data: { box: { id: `box_${id}` } } });

describe('events shared by the sinks of one event', () => {
  it('builds each event once for every lane, and its JSON once', () => {
    const eventOf = recentEvents('urn:test');
    const first = eventOf('evt_1', payload('evt_1'), null);
    expect(eventOf('evt_1', payload('evt_1'), null)).toBe(first);
    expect(first).toMatchObject({ id: 'evt_1', source: 'urn:test', subject: 'box_evt_1' });
    expect(eventOf('evt_2', payload('evt_2'), null)).not.toBe(first);
    expect(eventJson(first)).toBe(JSON.stringify(first));
    expect(eventJson(first)).toBe(eventJson(first));
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
});
