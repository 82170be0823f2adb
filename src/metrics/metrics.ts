import { Counter, Gauge, Histogram, collectDefaultMetrics, type Registry } from 'prom-client';
import { DEFAULT_ACCOUNT } from '../config/default-account.js';
import { BOX_EVENT_TYPES } from '../events/types.js';
import type { StorageSpace } from '../store/engines/storage-space.js';

export const BOX_STATES = [
  'provisioning',
  'provisioned',
  'cloning',
  'ready',
  'idle',
  'running',
  'archiving',
  'archived',
  'error',
] as const;
export const WEBHOOK_OUTCOMES = [
  'accepted',
  'duplicate',
  'missing_header',
  'duplicate_header',
  'malformed_timestamp',
  'timestamp_out_of_window',
  'payload_too_large',
  'malformed_signature',
  'invalid_signature',
  'invalid_event',
  'delivery_id_mismatch',
  'storage_unavailable',
  'internal_error',
  // An endpoint that serves no account (contract section 21), answered before anything is read.
  'not_found',
] as const;
export const SINK_OUTCOMES = ['delivered', 'retried', 'dead_lettered', 'skipped'] as const;
export const RECONCILE_OUTCOMES = ['succeeded', 'failed', 'dry-run'] as const;
export const RECONCILE_ORIGINS = ['history', 'synthesized'] as const;

export type WebhookOutcome = (typeof WEBHOOK_OUTCOMES)[number];

/**
 * The `account` of a request to `/webhooks/<name>` where no account has that name: one value for
 * every such name, so a scan of names cannot add series; no account name starts with `_`.
 */
export const UNKNOWN_ACCOUNT_LABEL = '_unknown';
export type SinkOutcome = (typeof SINK_OUTCOMES)[number];

/**
 * Folds stored box states into bounded `boxes{state}` label values: the documented states as they
 * are, `other` for any state the upstream may add, `unknown` for boxes with no state yet (only
 * `box.hydrated` seen). Box ids never become labels.
 */
export function boxStateCounts(rows: { state: string | null; count: number }[]): Record<string, number> {
  const known: readonly string[] = BOX_STATES;
  const counts: Record<string, number> = {};
  for (const { state, count } of rows) {
    const label = state === null ? 'unknown' : known.includes(state) ? state : 'other';
    counts[label] = (counts[label] ?? 0) + count;
  }
  return counts;
}

/**
 * Event types as label values: the documented ones and, for types the upstream adds later, the
 * type itself up to a cap, after which `other`; signed input can then never grow the label set
 * without bound.
 */
export function createTypeLabeler(maxExtraTypes = 50): (type: string) => string {
  const known = new Set<string>(BOX_EVENT_TYPES);
  return (type) => {
    if (known.has(type)) return type;
    if (known.size < BOX_EVENT_TYPES.length + maxExtraTypes && /^[A-Za-z0-9_.-]{1,64}$/.test(type)) {
      known.add(type);
      return type;
    }
    return 'other';
  };
}

/** Values read at scrape time from the database and the running parts. */
export interface MetricSources {
  /** Bytes the database takes: the SQLite file with its WAL, or PostgreSQL's `pg_database_size`. */
  databaseBytes?(): Promise<number>;
  /** SQLite only: the space of the filesystem that holds the database file. */
  storageSpace?(): Promise<StorageSpace>;
  pendingBySink?(): Promise<Record<string, number>>;
  deadLettersBySink?(): Promise<Record<string, number>>;
  boxesByState?(): Promise<Record<string, number>>;
  sinkUp?(): Record<string, boolean>;
  /** Sinks paused now (by their failures or an operator). */
  pausedSinks?(): Promise<string[]>;
  /** Each sink's share of failed attempts over the last 5 minutes, every replica's (0 under 10 attempts). */
  sinkFailureRatios?(): Promise<Record<string, number>>;
  /**
   * The accepted secrets now of each account whose endpoint is served (contract section 21), by
   * account name, with their slots (within the account) and expiry (epoch ms).
   */
  secrets?(): Record<string, { slot: number; expiresAt?: number | undefined }[]>;
  ready?(): Promise<boolean>;
  /** Set when reconciliation is on: epoch ms of the newest successful run on any replica, or null. */
  reconcileLastSuccessAt?(): Promise<number | null>;
  /** How long the oldest stored delivery has waited for its log position, in seconds (0: none waits). */
  logUnnumberedSeconds?(): Promise<number>;
  /** Set when scheduled backups are on: epoch ms of the newest backup written, or null. */
  backupLastSuccessAt?(): number | null;
}

/** The metrics the relay's parts update; the rest are read at scrape time from `MetricSources`. */
export interface Metrics {
  /** Present when reconciliation is configured. */
  reconcile: ReconcileCounters | undefined;
  /** A bounded label value for an event type. */
  eventTypeLabel(type: string): string;
  webhookRequests: Counter<'account' | 'outcome'>;
  events: Counter<'account' | 'type'>;
  signatureMatches: Counter<'account' | 'slot'>;
  sinkDeliveries: Counter<'sink' | 'outcome'>;
  sinkDeliveryDuration: Histogram<'sink'>;
  eventDelay: Histogram;
  /** Hook filters that failed on an event (counted as false), by hook (contract section 14). */
  filterErrors: Counter<'sink'>;
  /** Hook transforms that failed on an event (a dead letter), by hook (contract section 17). */
  transformErrors: Counter<'sink'>;
}

export interface ReconcileCounters {
  runs: Counter<'outcome'>;
  events: Counter<'origin'>;
  boxesForgotten: Counter;
  lastSuccess: Gauge;
}

/**
 * The metrics of contract section 6, registered on an injected Registry. Every counter starts at 0
 * for each known label value so rate() and increase() see the first occurrence.
 */
export function createMetrics(
  registry: Registry,
  options: {
    sinks: string[];
    /** `default` and the configured accounts (contract section 21): the `account` label's values. */
    accounts?: readonly string[];
    filtered?: string[];
    transformed?: string[];
    sources?: MetricSources;
  },
): Metrics {
  const accounts = options.accounts ?? [DEFAULT_ACCOUNT];
  const registers = [registry];
  const sources = options.sources ?? {};
  const prefix = 'boxrelay_';
  collectDefaultMetrics({ register: registry });

  const webhookRequests = new Counter({
    name: `${prefix}webhook_requests_total`,
    help: 'Webhook requests by account and outcome: accepted, duplicate, or the refusal code',
    labelNames: ['account', 'outcome'] as const,
    registers,
  });
  for (const account of accounts) for (const outcome of WEBHOOK_OUTCOMES) webhookRequests.inc({ account, outcome }, 0);
  webhookRequests.inc({ account: UNKNOWN_ACCOUNT_LABEL, outcome: 'not_found' }, 0);

  const events = new Counter({
    name: `${prefix}events_total`,
    help: 'Unique events stored, by account and type (duplicates not counted)',
    labelNames: ['account', 'type'] as const,
    registers,
  });
  for (const account of accounts) for (const type of BOX_EVENT_TYPES) events.inc({ account, type }, 0);

  const signatureMatches = new Counter({
    name: `${prefix}signature_secret_matches_total`,
    help: "Requests whose signature verified, by account and the slot of the account's secret that matched",
    labelNames: ['account', 'slot'] as const,
    registers,
  });
  /** Each served account's accepted secrets now; their slots start at 0 too, so increase() sees a slot's first match. */
  const acceptedSecrets = () => {
    const byAccount = Object.entries(sources.secrets?.() ?? {});
    for (const [account, accepted] of byAccount) for (const { slot } of accepted) signatureMatches.inc({ account, slot: String(slot) }, 0);
    return byAccount;
  };
  acceptedSecrets();

  const sinkDeliveries = new Counter({
    name: `${prefix}sink_deliveries_total`,
    help: `Fan-out attempts by sink and outcome: ${SINK_OUTCOMES.join(', ')} (a hook's transform gave null, so nothing was sent)`,
    labelNames: ['sink', 'outcome'] as const,
    registers,
  });
  for (const sink of options.sinks) for (const outcome of SINK_OUTCOMES) sinkDeliveries.inc({ sink, outcome }, 0);

  const sinkDeliveryDuration = new Histogram({
    name: `${prefix}sink_delivery_duration_seconds`,
    help: 'Time of one delivery attempt to a sink',
    labelNames: ['sink'] as const,
    buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    registers,
  });

  const filterErrors = new Counter({
    name: `${prefix}filter_errors_total`,
    help: "Events a hook's filter failed on (a missing field, a wrong type, the cost limit), counted as false",
    labelNames: ['sink'] as const,
    registers,
  });
  for (const sink of options.filtered ?? []) filterErrors.inc({ sink }, 0);

  const transformErrors = new Counter({
    name: `${prefix}transform_errors_total`,
    help: "Events a hook's transform failed on (a missing field, a wrong type, the cost limit): each a dead letter for that hook",
    labelNames: ['sink'] as const,
    registers,
  });
  for (const sink of options.transformed ?? []) transformErrors.inc({ sink }, 0);

  const eventDelay = new Histogram({
    name: `${prefix}event_delay_seconds`,
    help: 'Time from the upstream createdAt to receipt of the first delivery of an event',
    buckets: [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600],
    registers,
  });

  /** Storage unreadable: undefined, so a gauge keeps its last counts rather than fail the whole scrape (ready shows it). */
  const countsOrKeep = async (read?: () => Promise<Record<string, number>>): Promise<Record<string, number> | undefined> => {
    try {
      return (await read?.()) ?? {};
    } catch {
      return undefined;
    }
  };

  const bySinkGauge = (name: string, help: string, read?: () => Promise<Record<string, number>>) =>
    new Gauge({
      name: `${prefix}${name}`,
      help,
      labelNames: ['sink'] as const,
      registers,
      async collect() {
        const counts = await countsOrKeep(read);
        if (!counts) return;
        // Reset first: a sink whose last row was handled must read 0, not its last count.
        this.reset();
        for (const sink of new Set([...options.sinks, ...Object.keys(counts)])) this.set({ sink }, counts[sink] ?? 0);
      },
    });
  bySinkGauge('outbox_pending', 'Events waiting for delivery (outbox rows and the log past the cursors), by sink', sources.pendingBySink);
  bySinkGauge('dead_letters', 'Dead letters waiting to be retried or discarded, by sink', sources.deadLettersBySink);
  bySinkGauge(
    'sink_failure_ratio',
    "Share of the sink's failed attempts over the last 5 minutes, every replica's (0 with fewer than 10 attempts), by sink",
    sources.sinkFailureRatios,
  );

  new Gauge({
    name: `${prefix}boxes`,
    help: 'Boxes by last known state',
    labelNames: ['state'] as const,
    registers,
    async collect() {
      const counts = await countsOrKeep(sources.boxesByState);
      if (!counts) return;
      this.reset();
      for (const state of new Set([...BOX_STATES, ...Object.keys(counts)])) this.set({ state }, counts[state] ?? 0);
    },
  });

  new Gauge({
    name: `${prefix}log_unnumbered_seconds`,
    help: 'How long the oldest stored delivery has waited for its log position (PostgreSQL; 0: none waits): no sink can be sent it before',
    registers,
    async collect() {
      const seconds = await sources.logUnnumberedSeconds?.().catch(() => undefined);
      this.set(seconds ?? 0);
    },
  });

  /** A gauge read at scrape time; a read that fails keeps the last value rather than fail the whole scrape. */
  const readGauge = (name: string, help: string, read?: () => Promise<number>) =>
    new Gauge({
      name: `${prefix}${name}`,
      help,
      registers,
      async collect() {
        const value = await read?.().catch(() => undefined);
        if (value !== undefined) this.set(value);
      },
    });
  readGauge('database_bytes', 'Bytes the database takes: the SQLite file with its WAL, or pg_database_size on PostgreSQL', sources.databaseBytes);
  // SQLite only: PostgreSQL's volume is its server's to watch.
  const space = sources.storageSpace;
  if (space) {
    readGauge('storage_free_bytes', 'SQLite: free bytes of the filesystem holding the database file (what the relay may still write)', async () => (await space()).freeBytes);
    readGauge('storage_size_bytes', 'SQLite: size in bytes of the filesystem holding the database file', async () => (await space()).sizeBytes);
  }

  new Gauge({
    name: `${prefix}sink_up`,
    help: '1 when the sink is connected or answering',
    labelNames: ['sink'] as const,
    registers,
    collect() {
      const up = sources.sinkUp?.() ?? {};
      for (const sink of options.sinks) this.set({ sink }, up[sink] === false ? 0 : 1);
    },
  });

  new Gauge({
    name: `${prefix}sink_paused`,
    help: '1 while the sink is paused (its work waits)',
    labelNames: ['sink'] as const,
    registers,
    async collect() {
      const paused = await sources.pausedSinks?.().catch(() => undefined);
      if (!paused) return;
      for (const sink of options.sinks) this.set({ sink }, paused.includes(sink) ? 1 : 0);
    },
  });

  // Reset first: an account whose endpoint is no longer served (`default` losing its last secret
  // beside other accounts) leaves the gauges rather than read as an account without secrets.
  new Gauge({
    name: `${prefix}secrets_valid`,
    help: 'Signing secrets accepted now, by account (each account whose endpoint is served)',
    labelNames: ['account'] as const,
    registers,
    collect() {
      this.reset();
      for (const [account, accepted] of acceptedSecrets()) this.set({ account }, accepted.length);
    },
  });

  new Gauge({
    name: `${prefix}secret_expiry_timestamp_seconds`,
    help: 'Expiry time of each accepted secret that has one, by account and slot',
    labelNames: ['account', 'slot'] as const,
    registers,
    collect() {
      this.reset();
      for (const [account, accepted] of acceptedSecrets()) {
        for (const { slot, expiresAt } of accepted) if (expiresAt !== undefined) this.set({ account, slot: String(slot) }, expiresAt / 1000);
      }
    },
  });

  new Gauge({
    name: `${prefix}ready`,
    help: '1 when /readyz would answer 200',
    registers,
    async collect() {
      this.set((await sources.ready?.()) === false ? 0 : 1);
    },
  });

  // Only with scheduled backups: a relay that writes none has no backup to be late.
  const backupLastSuccessAt = sources.backupLastSuccessAt;
  if (backupLastSuccessAt) {
    new Gauge({
      name: `${prefix}backup_last_success_timestamp_seconds`,
      help: 'Time of the newest scheduled backup (BOXRELAY_BACKUP_DIR), the moment its copy holds (0: none yet)',
      registers,
      collect() {
        this.set((backupLastSuccessAt() ?? 0) / 1000);
      },
    });
  }

  const lastSuccessAt = sources.reconcileLastSuccessAt;
  const reconcile = lastSuccessAt && {
    runs: initialized(
      new Counter({ name: `${prefix}reconcile_runs_total`, help: 'Reconciliation runs by outcome', labelNames: ['outcome'] as const, registers }),
      RECONCILE_OUTCOMES.map((outcome) => ({ outcome })),
    ),
    events: initialized(
      new Counter({
        name: `${prefix}reconcile_events_total`,
        help: 'Events a reconciliation run stored, by origin (history, synthesized)',
        labelNames: ['origin'] as const,
        registers,
      }),
      RECONCILE_ORIGINS.map((origin) => ({ origin })),
    ),
    boxesForgotten: initialized(
      new Counter({ name: `${prefix}reconcile_boxes_forgotten_total`, help: 'Boxes forgotten because the upstream no longer lists them', registers }),
      [{}],
    ),
    lastSuccess: new Gauge({
      name: `${prefix}reconcile_last_success_timestamp_seconds`,
      help: "End of the newest successful reconciliation run on any replica; with several accounts reconciled, the oldest of the accounts' (0: one has none yet)",
      registers,
      async collect() {
        // Read from the database, so every replica reports the run whichever replica made it.
        const at = await lastSuccessAt().catch(() => undefined);
        if (at !== undefined) this.set((at ?? 0) / 1000);
      },
    }),
  };

  return {
    reconcile,
    eventTypeLabel: createTypeLabeler(),
    webhookRequests,
    events,
    signatureMatches,
    sinkDeliveries,
    sinkDeliveryDuration,
    eventDelay,
    filterErrors,
    transformErrors,
  };
}

/** A counter with each known label set at 0, so increase() sees the first occurrence. */
function initialized<T extends string>(counter: Counter<T>, labelSets: Partial<Record<T, string>>[]): Counter<T> {
  for (const labels of labelSets) counter.inc(labels, 0);
  return counter;
}
