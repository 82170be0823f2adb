import { createHash } from 'node:crypto';
import { RelayError } from '../errors.js';
import { parseEvent, type ParsedEvent } from '../events/parse-event.js';
import { BOX_EVENT_TYPES } from '../events/types.js';
import type { UpstreamBox } from '../upstream/client.js';
import { InvalidHistoryRecordError } from './errors.js';

const EVENT_ID = /^evt_[A-Za-z0-9]{1,64}$/;
const ISO_TIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/;

const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/**
 * A record of `GET /boxes/{boxId}/events` as the event it stands for: the delivery payload itself,
 * or one under the record's `event` key (the record shape is not documented). It is then parsed by
 * the receiver's own parser, so the same rules and limits apply to both entrances.
 */
export function historyEvent(record: unknown, boxId: string, index: number): ParsedEvent {
  const fail = (problem: string) => new InvalidHistoryRecordError(boxId, index, problem);
  const candidate = isRecord(record) && isRecord(record.event) ? record.event : record;
  if (!isRecord(candidate)) throw fail('not an object');
  const { id, type, createdAt } = candidate;
  if (typeof id !== 'string' || !EVENT_ID.test(id)) throw fail('id is not an evt_ id');
  if (typeof type !== 'string' || !(BOX_EVENT_TYPES as readonly string[]).includes(type)) throw fail('type is not a known box event type');
  if (typeof createdAt !== 'string' || !ISO_TIME.test(createdAt) || Number.isNaN(Date.parse(createdAt))) throw fail('createdAt is not ISO 8601');
  let event: ParsedEvent;
  try {
    event = parseEvent(Buffer.from(JSON.stringify(candidate)), id);
  } catch (error) {
    if (error instanceof RelayError) throw fail(error.message);
    throw error;
  }
  if (event.boxId !== boxId) throw fail('data.box.id is another box');
  return event;
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
