import { toCloudEvent, type CloudEvent } from '../events/cloudevent.js';

/** Events kept: the lanes of one event's sinks read it within a few reads of each other. */
const KEPT = 2048;

/**
 * Each recent event's CloudEvent, built once for all the sinks it goes to (and so its JSON, which
 * `eventJson` keeps per event), not parsed again by every lane. Oldest out first.
 */
export function recentEvents(source: string): (eventId: string, payload: string, origin: string | null) => CloudEvent {
  const built = new Map<string, CloudEvent>();
  return (eventId, payload, origin) => {
    let event = built.get(eventId);
    if (event === undefined) {
      event = toCloudEvent(payload, source, origin);
      built.set(eventId, event);
      if (built.size > KEPT) built.delete(built.keys().next().value as string);
    }
    return event;
  };
}
