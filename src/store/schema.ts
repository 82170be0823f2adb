import type { Generated } from 'kysely';
import type { LatencyColumn } from './attempts/latency-buckets.js';

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
  /**
   * Who brought the event: a reconciliation run (`history`, `synthesized`), the relay itself
   * (`operator`, its operator events); null for a received webhook. Free text: no migration per value.
   */
  origin: EventOrigin | null;
  /**
   * Log position: null for deliveries stored before migration 012 (`sinks` null too: the log never
   * reads them) and, on PostgreSQL, for those the sequencer has not numbered yet.
   */
  seq: number | null;
  /** PostgreSQL: the order it was stored in (a sequence), which the sequencer numbers by; null on SQLite. */
  arrival: Generated<number | null>;
  /** Which partition of each sink's log the event is in (by its box). */
  part: Generated<number>;
  /** The sinks it was routed to when accepted, comma-joined; null before migration 012. */
  sinks: string | null;
  /** W3C traceparent of the span that stored it (tracing on): its attempts join that trace. */
  trace_parent: string | null;
}

/** How a reconciliation run found an event (contract section 9, `boxrelayorigin`). */
export type ReconcileOrigin = 'history' | 'synthesized';
export type EventOrigin = ReconcileOrigin | 'operator';

/**
 * `pending`: work; `delivered`: the sink acknowledged it; `dead`: a dead letter (the sink gave up);
 * `discarded`: a dead letter an operator discarded; `set_aside`: work of a sink no replica serves any
 * more, listed with the dead letters.
 */
export type OutboxStatus = 'pending' | 'delivered' | 'dead' | 'discarded' | 'set_aside';

/**
 * Fan-out: one row per (delivery, sink) the event was routed to, committed with the delivery (or by
 * a replay). A row is kept with its outcome, attempts and last error until retention removes it
 * with its delivery, so each event's status per sink is read, never guessed.
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
  /** The event's box: with per-box ordering, a row waits while an earlier row of its box is pending. */
  box_id: string | null;
  /** W3C traceparent of the span that stored the row (tracing on): its attempts join that trace. */
  trace_parent: string | null;
  /** How often a resend, a replay or a retry reopened the row: an attempt settles it only under the version it claimed. */
  version: Generated<number>;
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
  /** The upstream `updatedAt` a reconciliation run last repaired the box up to (contract section 9). */
  repaired_up_to: string | null;
}

/** Signing secrets received from the upstream API (`boxrelay upstream register|rotate`). */
export interface SecretsTable {
  id: Generated<number>;
  /** Encrypted at rest when BOXRELAY_SECRETS_ENCRYPTION_KEY is set. */
  secret: string;
  webhook_id: string | null;
  created_at: number;
  expires_at: number | null;
  /** The account whose endpoint accepts it (contract section 21); `default` (the column's default) for those stored before accounts. */
  account: Generated<string>;
}

/** One row, written by readiness probes to prove storage accepts commits. */
export interface HeartbeatTable {
  id: number;
  beat_at: number;
}

/** Facts about the database itself, such as `watch_start`. */
export interface RelayMetaTable {
  name: string;
  value: string;
}

/** Named leases that keep a job to one process at a time across replicas; an expired lease is free. */
export interface LeasesTable {
  name: string;
  holder: string;
  expires_at: number;
}

/** Reconciliation runs; `report` is the run's JSON report (contract section 9). */
export interface ReconcileRunsTable {
  id: string;
  started_at: number;
  finished_at: number | null;
  outcome: string | null;
  report: string;
  /** The account the run reconciled (contract section 21); `default` (the column's default) for those stored before accounts. */
  account: Generated<string>;
}

/** Per sink, shared by replicas: since when every attempt failed, and whether it is paused (contract section 5). */
export interface SinkStateTable {
  sink: string;
  failing_since: number | null;
  paused_at: number | null;
  paused_by: 'failures' | 'operator' | null;
  /** While paused by failures: when the next probe attempt may be made. */
  next_probe_at: number | null;
  /** Grows with every pause and resume: the lanes acknowledge it (`log_readers.seen_epoch`). */
  epoch: Generated<number>;
}

/** Operator changes through the admin API or the CLI (contract section 15). */
export interface AuditTable {
  id: Generated<number>;
  /** Epoch ms. */
  at: number;
  action: AuditAction;
  /** The dead-letter id, sink name or box id acted on; null for a replay of every sink or a reconcile. */
  target: string | null;
  /** The admin client's address, or `cli`. */
  by: string;
  /** The request's parameters, as JSON. */
  detail: string;
  /** The event whose dead letter a retry or discard of one id touched (not part of an entry: a filter). */
  event_id: string | null;
}

export type AuditAction = 'retry' | 'discard' | 'retry_all' | 'replay' | 'pause' | 'resume' | 'forget' | 'reconcile' | 'resend';

/** Per sink and UTC minute: acknowledged deliveries and failed attempts (counted as they happen; a row of the outbox holds only its last outcome). */
export interface SinkMinutesTable {
  sink: string;
  /** Epoch ms of the minute's start. */
  minute: number;
  delivered: number;
  failed: number;
}

/** Per sink and UTC minute, its attempts summed as they are written (contract section 16's health). */
export type AttemptMinutesTable = {
  sink: string;
  /** Epoch ms of the minute's start. */
  minute: number;
  delivered: number;
  retried: number;
  dead_lettered: number;
  /** Epoch ms: when the minute's latest success (failure) started. */
  last_success_at: number | null;
  last_failure_at: number | null;
  /** The slowest answered attempt's duration. */
  slowest_ms: number;
} & { [column in LatencyColumn]: number };

/** Per sink, UTC minute and status key (HTTP status, else the failure's class or code), its attempts. */
export interface AttemptStatusesTable {
  sink: string;
  minute: number;
  status: string;
  attempts: number;
}

/** Each attempt to deliver an event to a sink (contract section 16). */
export interface AttemptsTable {
  id: Generated<number>;
  event_id: string;
  sink: string;
  /** Counts from 1 per event and sink, across resends. */
  n: number;
  /** Epoch ms when the attempt started. */
  at: number;
  duration_ms: number;
  outcome: 'delivered' | 'retried' | 'dead_lettered';
  status: number | null;
  error_code: string | null;
  error_message: string | null;
  /** 1 when the receiver or broker answered. */
  answered: number;
  /** JSON of a hook's `{url, headers}`. */
  request: string | null;
  /** JSON of a hook's `{headers, body, bodyTruncated}`. */
  response: string | null;
}

/** Which sinks some replica serves, and when it last said so (a heartbeat): work of a sink none serves is set aside after a grace period. */
export interface SinkServersTable {
  sink: string;
  /** Epoch ms by the lease clock (the database's on PostgreSQL). */
  served_at: number;
}

/** Per sink and log partition: done up to this position, and which process reads it now. */
export interface LogCursorsTable {
  sink: string;
  part: number;
  seq: number;
  lease_owner: string | null;
  lease_until: number | null;
  updated_at: number;
  /** Grows each time the partition is taken: a holder's writes name it and are refused once it moved on. */
  epoch: Generated<number>;
}

/** When a cursor passed a position (the acknowledgement time of events delivered at their first attempt). */
export interface LogMarksTable {
  sink: string;
  part: number;
  seq: number;
  at: number;
}

/** Processes reading a sink's log, and when they last said so. */
export interface LogReadersTable {
  sink: string;
  owner: string;
  seen_at: number;
  /** The lane's lease: until then it may send, with the pause state of `seen_epoch`. */
  lease_until: number | null;
  /** The newest `sink_state.epoch` the lane has taken (a pause waits for it). */
  seen_epoch: Generated<number>;
}

/** An S3 archive object, recorded before it is written (migration 023). */
export interface ArchiveObjectsTable {
  key: string;
  /** gzip NDJSON, base64, until S3 has it. */
  body: string | null;
  created_at: number;
  written_at: number | null;
}

/** Which archive object holds an item: an event id, or an outbox row's version of one. */
export interface ArchiveItemsTable {
  item: string;
  object_key: string;
  created_at: number;
}

export interface Schema {
  deliveries: DeliveriesTable;
  outbox: OutboxTable;
  boxes: BoxesTable;
  secrets: SecretsTable;
  heartbeat: HeartbeatTable;
  relay_meta: RelayMetaTable;
  leases: LeasesTable;
  reconcile_runs: ReconcileRunsTable;
  sink_state: SinkStateTable;
  audit: AuditTable;
  sink_minutes: SinkMinutesTable;
  sink_servers: SinkServersTable;
  log_cursors: LogCursorsTable;
  log_marks: LogMarksTable;
  log_readers: LogReadersTable;
  attempts: AttemptsTable;
  attempt_minutes: AttemptMinutesTable;
  attempt_statuses: AttemptStatusesTable;
  archive_objects: ArchiveObjectsTable;
  archive_items: ArchiveItemsTable;
}
