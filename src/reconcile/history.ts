import { createHash } from 'node:crypto';
import { RelayError } from '../errors.js';
import { isDeliveryPayload, parseEvent, type ParsedEvent } from '../events/parse-event.js';
import { isRecord } from '../json.js';
import type { UpstreamBox } from '../upstream/client.js';

const EVENT_ID = /^evt_[A-Za-z0-9]{1,64}$/;

/** What one record of a box's history is to a run (contract section 9, step 3). */
export type HistoryRecord =
  | { kind: 'event'; event: ParsedEvent }
  /** Not a lifecycle event: a work record of a shape the upstream does not show, or another type. Skipped. */
  | { kind: 'other' }
  /** Shaped as a lifecycle event but unusable (a bad id, another box's id): skipped and logged. */
  | { kind: 'malformed'; id: string; problem: string };

/**
 * A record of `GET /boxes/{boxId}/events` as the event it stands for: the delivery payload itself,
 * or one under the record's `event` key (the record shape is not documented). Most of a history is
 * not lifecycle events; only records with the payload's shape and a `box.` type are. Those are
 * parsed by the receiver's own parser, so the same rules and limits apply to both entrances (and a
 * `boxrelay.` type is never taken).
 */
export function readHistoryRecord(record: unknown, boxId: string): HistoryRecord {
  const candidate = isRecord(record) && isRecord(record.event) ? record.event : record;
  if (!isDeliveryPayload(candidate) || !candidate.type.startsWith('box.')) return { kind: 'other' };
  const { id } = candidate;
  const malformed = (problem: string): HistoryRecord => ({ kind: 'malformed', id, problem });
  if (!EVENT_ID.test(id)) return malformed('id is not an evt_ id');
  let event: ParsedEvent;
  try {
    event = parseEvent(Buffer.from(JSON.stringify(candidate)), id);
  } catch (error) {
    if (error instanceof RelayError) return malformed(error.message);
    throw error;
  }
  if (event.boxId !== boxId) return malformed('data.box.id names another box');
  return { kind: 'event', event };
}

/** The state a synthesized event announces, by the upstream state it reports (contract section 9, step 4). */
const SYNTHESIZED_TYPE: Record<string, string> = {
  ready: 'box.ready',
  idle: 'box.ready',
  running: 'box.ready',
  error: 'box.error',
  archived: 'box.archived',
};

export function synthesizedType(state: string): string | undefined {
  return SYNTHESIZED_TYPE[state];
}

/**
 * The one event that explains a state the history does not: its id is derived from the box, the
 * state and `updatedAt`, so runs and replicas make the same id and dedup collapses them.
 */
export function synthesizedEvent(box: UpstreamBox, previousState: string | null): ParsedEvent {
  const type = synthesizedType(box.state);
  if (type === undefined) throw new TypeError(`no event type stands for state ${box.state}`);
  const id = `evt_${createHash('sha256').update(`${box.id}|${box.state}|${box.updatedAt}`).digest('hex').slice(0, 32)}`;
  const payload = {
    id,
    type,
    createdAt: box.updatedAt,
    data: {
      box: { id: box.id, ...(box.name === undefined ? {} : { name: box.name }) },
      ...(previousState === null ? {} : { previousState }),
      state: box.state,
    },
  };
  return parseEvent(Buffer.from(JSON.stringify(payload)), id);
}
