import { describe, expect, it } from 'vitest';
import { recentEvents, type RecentLimits } from '../src/dispatch/recent-events.js';
import { toCloudEvent, type CloudEvent } from '../src/events/cloudevent.js';
import { jsonOnceEach } from '../src/sinks/failures.js';

const payload = (id: string, extra = '') => JSON.stringify({ id, type: 'box.ready', createdAt: '2026-11-25T10:00:00Z', data: { box: { id: `box_${id}` }, extra } });

/** The recent events of a relay whose builds are counted, with the given limits (the production ones by default). */
function counted(limits?: RecentLimits) {
  const builds: string[] = [];
  const eventOf = recentEvents('urn:test', {
    limits,
    build: (body, source, origin) => {
      builds.push((JSON.parse(body) as { id: string }).id);
      return toCloudEvent(body, source, origin);
    },
  });
  return { eventOf, builds };
}

describe('events shared by the sinks of one event', () => {
  it('builds each event once for every lane, and its JSON once', () => {
    const { eventOf, builds } = counted();
    const first = eventOf('evt_1', payload('evt_1'), null);
    expect(eventOf('evt_1', payload('evt_1'), null)).toBe(first);
    expect(first).toMatchObject({ id: 'evt_1', source: 'urn:test', subject: 'box_evt_1' });
    expect(eventOf('evt_2', payload('evt_2'), null)).not.toBe(first);
    expect(builds).toEqual(['evt_1', 'evt_2']);

    const stringified: CloudEvent[] = [];
    const jsonOf = jsonOnceEach((event) => (stringified.push(event), JSON.stringify(event)));
    const json = jsonOf(first);
    expect(jsonOf(first)).toBe(json);
    expect(stringified).toEqual([first]);
    expect(JSON.parse(json)).toEqual(first);
  });

  it('builds again for the same id with another payload or origin (an id is not trusted to name one event)', () => {
    const { eventOf, builds } = counted();
    const first = eventOf('evt_1', payload('evt_1'), null);
    const changed = eventOf('evt_1', payload('evt_1', 'other'), null);
    expect(changed).not.toBe(first);
    expect(changed.data).toMatchObject({ extra: 'other' });
    const operator = eventOf('evt_1', payload('evt_1', 'other'), 'operator');
    expect(operator.source).toBe('urn:test/boxrelay');
    expect(builds).toEqual(['evt_1', 'evt_1', 'evt_1']);
  });

  it('keeps the most recent `events`: an older one is built again', () => {
    const events = 3;
    const { eventOf, builds } = counted({ events, payloadChars: Number.MAX_SAFE_INTEGER });
    const first = eventOf('evt_0', payload('evt_0'), null);
    for (let i = 1; i < events; i++) eventOf(`evt_${i}`, payload(`evt_${i}`), null);
    expect(eventOf('evt_0', payload('evt_0'), null)).toBe(first);
    eventOf(`evt_${events}`, payload(`evt_${events}`), null);
    // evt_0 was the oldest built: it went out for evt_3, and is built again.
    const again = eventOf('evt_0', payload('evt_0'), null);
    expect(again).not.toBe(first);
    expect(again).toEqual(first);
    expect(builds).toEqual(['evt_0', 'evt_1', 'evt_2', 'evt_3', 'evt_0']);
  });

  it('keeps at most `payloadChars` of payloads: large events push the oldest out sooner', () => {
    const large = (id: string) => payload(id, 'x'.repeat(1000));
    const { eventOf, builds } = counted({ events: 100, payloadChars: 2.5 * large('evt_a').length });
    const first = eventOf('evt_a', large('evt_a'), null);
    eventOf('evt_b', large('evt_b'), null);
    expect(eventOf('evt_a', large('evt_a'), null)).toBe(first);
    eventOf('evt_c', large('evt_c'), null);
    expect(eventOf('evt_a', large('evt_a'), null)).not.toBe(first);
    expect(builds).toEqual(['evt_a', 'evt_b', 'evt_c', 'evt_a']);
  });
});
