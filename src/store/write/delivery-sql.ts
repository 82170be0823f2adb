import type { ParsedEvent } from '../../events/parse-event.js';
import { BOX_COLUMNS } from '../state/boxes.js';
import { joinSinks, logHeadSql, partOf } from '../log/position.js';
import type { EventOrigin } from '../schema.js';

/**
 * The statements of the hot write path: SQLite runs them as prepared statements; PostgreSQL's batch
 * statement (postgres-delivery-writer.ts) shares the columns and the box rule.
 */
export const DELIVERY_COLUMNS = 'id, type, box_id, created_at, received_at, attempt, payload, origin, part, sinks, trace_parent';

/**
 * A delivery appended to the log on SQLite: the writer holds the file's write lock for the whole
 * transaction, so the next position follows the log's head (two seeks) and commit order.
 */
export const INSERT_LOGGED_DELIVERY = `INSERT INTO deliveries (${DELIVERY_COLUMNS}, seq)
  VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,
    ${logHeadSql('sqlite')} + 1) ON CONFLICT (id) DO NOTHING`;

export const SELECT_PAYLOAD = 'SELECT payload FROM deliveries WHERE id = ?';

// An event moves a box only when it is not older than the one that set the stored state.
const APPLIES = `(excluded.state IS NOT NULL AND (boxes.state_changed_at IS NULL OR excluded.state_changed_at >= boxes.state_changed_at))`;
const ifApplies = (column: string): string =>
  `${column} = CASE WHEN ${APPLIES} THEN excluded.${column} ELSE boxes.${column} END`;

/**
 * What a stored event does to a box row that exists: the upsert's tail, shared by both engines'
 * statements, given the rule for the name (one event's, or a batch's).
 */
export const boxOnConflict = (nameRule: string): string => `ON CONFLICT (id) DO UPDATE SET
    ${['state', 'previous_state', 'state_changed_at', 'last_event_id'].map(ifApplies).join(',\n    ')},
    name = ${nameRule},
    hydrated_at = CASE WHEN excluded.hydrated_at IS NOT NULL AND (boxes.hydrated_at IS NULL OR excluded.hydrated_at > boxes.hydrated_at)
      THEN excluded.hydrated_at ELSE boxes.hydrated_at END,
    last_seen_at = CASE WHEN excluded.last_seen_at > boxes.last_seen_at THEN excluded.last_seen_at ELSE boxes.last_seen_at END`;

/** One event's name is taken when the event moves the box, or when the box has none. */
export const UPSERT_BOX = `INSERT INTO boxes (${BOX_COLUMNS.join(', ')})
  VALUES (${BOX_COLUMNS.map(() => '?').join(', ')})
  ${boxOnConflict(`CASE WHEN ${APPLIES} OR boxes.name IS NULL THEN COALESCE(excluded.name, boxes.name) ELSE boxes.name END`)}`;

export interface NewDelivery {
  event: ParsedEvent;
  /** Epoch ms. */
  receivedAt: number;
  attempt: number | null;
  /** The sinks it is routed to: each reads it from the log. */
  sinks: string[];
  /** Set when a reconciliation run or the relay itself, not a webhook, brought the event. */
  origin?: EventOrigin | undefined;
  /** The span that stores it (tracing on): kept with the delivery, so its attempts join that trace. */
  traceparent?: string | undefined;
}

export interface RecordResult {
  duplicate: boolean;
  /** A duplicate whose body differs from the stored first copy (which is kept). */
  payloadDiffers: boolean;
}

/** Stores a delivery once, in the log with its routed sinks and box state, in one durable commit. */
export interface DeliveryWriter {
  record(delivery: NewDelivery): Promise<RecordResult>;
}

export function deliveryParams({ event, receivedAt, attempt, origin, sinks, traceparent }: NewDelivery): unknown[] {
  return [
    event.id,
    event.type,
    event.boxId,
    event.createdAtIso,
    receivedAt,
    attempt,
    event.payload,
    origin ?? null,
    partOf(event.boxId),
    joinSinks(sinks),
    traceparent ?? null,
  ];
}

/** `box.hydrated` records hydratedAt and leaves the state alone (contract section 7). */
export function boxParams({ event, receivedAt }: NewDelivery): unknown[] | null {
  if (event.boxId === null) return null;
  const hydrated = event.type === 'box.hydrated';
  const state = hydrated ? null : event.state;
  return [
    event.boxId,
    event.boxName,
    state,
    state === null ? null : event.previousState,
    state === null ? null : event.createdAtIso,
    state === null ? null : event.id,
    hydrated ? event.createdAtIso : null,
    receivedAt,
  ];
}
