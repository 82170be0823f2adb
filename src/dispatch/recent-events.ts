import { toCloudEvent, type CloudEvent } from '../events/cloudevent.js';

/** Events kept: the lanes of one event's sinks read it within a few reads of each other. */
const KEPT = 2048;
/** And at most this many payload characters, so large bodies (maxBodyBytes has no upper limit) hold little memory. */
const KEPT_CHARS = 8 * 1024 * 1024;

interface Built {
  payload: string;
  origin: string | null;
  event: CloudEvent;
}

/**
 * Each recent event's CloudEvent, built once for all the sinks it goes to (and so its JSON, which
 * `eventJson` keeps per event), not parsed again by every lane. Oldest out first. A hit must have
 * the same payload and origin: an id is never trusted to name one event forever.
 */
export function recentEvents(source: string): (eventId: string, payload: string, origin: string | null) => CloudEvent {
  const built = new Map<string, Built>();
  let chars = 0;
  return (eventId, payload, origin) => {
    const kept = built.get(eventId);
    if (kept !== undefined && kept.payload === payload && kept.origin === origin) return kept.event;
    const event = toCloudEvent(payload, source, origin);
    if (kept !== undefined) {
      built.delete(eventId);
      chars -= kept.payload.length;
    }
    built.set(eventId, { payload, origin, event });
    chars += payload.length;
    for (const [id, oldest] of built) {
      if (built.size <= KEPT && chars <= KEPT_CHARS) break;
      built.delete(id);
      chars -= oldest.payload.length;
    }
    return event;
  };
}
