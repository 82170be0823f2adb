import type { Generated } from 'kysely';

/** One row per delivery id: the dedup key and the event's durable copy. */
export interface DeliveriesTable {
  id: string;
  type: string;
  box_id: string | null;
  /** Upstream createdAt, normalized with toISOString(). */
  created_at: string;
  /** Epoch ms. */
  received_at: number;
  attempt: number | null;
  /** The raw body as received. */
  payload: string;
}

export type OutboxStatus = 'pending' | 'dead';

/**
 * Fan-out work: one row per (delivery, sink) committed with the delivery, deleted once delivered;
 * `dead` rows are dead letters.
 */
export interface OutboxTable {
  id: Generated<number>;
  delivery_id: string;
  sink: string;
  status: OutboxStatus;
  attempts: number;
  /** Epoch ms before which the row is not tried. */
  next_attempt_at: number;
  last_error: string | null;
  /** Which process holds the row, and until when (a dead replica's claim expires). */
  lease_owner: string | null;
  lease_until: number | null;
  created_at: number;
  updated_at: number;
}

/** The last known state of each box (contract section 7). */
export interface BoxesTable {
  id: string;
  name: string | null;
  state: string | null;
  previous_state: string | null;
  /** createdAt (normalized) of the event that set `state`. */
  state_changed_at: string | null;
  last_event_id: string | null;
  hydrated_at: string | null;
  /** Epoch ms of the last delivery about the box; boxes silent past retention are forgotten. */
  last_seen_at: number;
}

/** Signing secrets received from the upstream API (`boxrelay upstream register|rotate`). */
export interface SecretsTable {
  id: Generated<number>;
  /** Encrypted at rest when BOXRELAY_SECRETS_ENCRYPTION_KEY is set. */
  secret: string;
  webhook_id: string | null;
  created_at: number;
  expires_at: number | null;
}

/** One row, written by readiness probes to prove storage accepts commits. */
export interface HeartbeatTable {
  id: number;
  beat_at: number;
}

export interface Schema {
  deliveries: DeliveriesTable;
  outbox: OutboxTable;
  boxes: BoxesTable;
  secrets: SecretsTable;
  heartbeat: HeartbeatTable;
}
