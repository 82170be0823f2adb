import { eventAccount, toCloudEvent, type CloudEvent } from '../events/cloudevent.js';
import { namedAccountOf } from '../store/account-keys.js';

export interface RecentLimits {
  /** Events kept: the lanes of one event's sinks read it within a few reads of each other. */
  events: number;
  /** And at most this many payload characters, so large bodies (maxBodyBytes has no upper limit) hold little memory. */
  payloadChars: number;
}

export const recentLimits: RecentLimits = { events: 2048, payloadChars: 8 * 1024 * 1024 };

/** Each configured account's CloudEvents `source` but `default`'s, by name: data, so it crosses to the fan-out's thread. */
export type AccountSources = Readonly<Record<string, string>>;

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
export function recentEvents(
  source: string,
  { limits = recentLimits, build = toCloudEvent, accountSources = {} }: { limits?: RecentLimits; build?: typeof toCloudEvent; accountSources?: AccountSources } = {},
): (eventId: string, payload: string, origin: string | null) => CloudEvent {
  const built = new Map<string, Built>();
  let chars = 0;
  return (eventId, payload, origin) => {
    const kept = built.get(eventId);
    if (kept !== undefined && kept.payload === payload && kept.origin === origin) return kept.event;
    const event = build(payload, source, origin, eventAccount(namedAccountOf(eventId), source, accountSources));
    if (kept !== undefined) {
      built.delete(eventId);
      chars -= kept.payload.length;
    }
    built.set(eventId, { payload, origin, event });
    chars += payload.length;
    for (const [id, oldest] of built) {
      if (built.size <= limits.events && chars <= limits.payloadChars) break;
      built.delete(id);
      chars -= oldest.payload.length;
    }
    return event;
  };
}
