import { sql, type Selectable } from 'kysely';
import type { Registry } from 'prom-client';
import { afterEach } from 'vitest';
import type { HookConfig } from '../../src/config/schema.js';
import type { DispatchTuning } from '../../src/dispatch/tuning.js';
import type { OutboxStatus, OutboxTable } from '../../src/store/schema.js';
import { createFanoutStore } from '../../src/store/fanout-store.js';
import { openStore, type Store } from '../../src/store/store.js';
import { waitFor } from './fanout.js';
import { hookServer, type HookServer } from './hook-server.js';
import { spawnRelay, type RelayProcess } from './process.js';
import { testRelay, type TestRelay, type TestRelayOptions } from './relay.js';

export const ADMIN_TOKEN = 'admin-token-for-tests-0123456789abcdef';
export const adminAuth = { Authorization: `Bearer ${ADMIN_TOKEN}` };

/** Fan-out timing for tests: millisecond in-process waits, scheduled retries due at once. */
export const fastTuning: Partial<DispatchTuning> = {
  pollMs: 200,
  quickMinDelayMs: 5,
  quickFactor: 2,
  retryDelayMs: () => 0,
};

export function hook(name: string, url: string, extra: Partial<HookConfig> = {}): Partial<HookConfig> {
  return { name, url, ...extra };
}

/**
 * The unsettled outbox rows of one sink (pending, dead letters, set aside), in id order: delivered
 * and discarded rows are kept for the event's status, and read with `settledRows`.
 */
export function outboxRows(t: TestRelay | Store, sink: string): Promise<Selectable<OutboxTable>[]> {
  return rowsOf(t, sink, ['pending', 'dead', 'set_aside']);
}

/** The delivered and discarded outbox rows of one sink, in id order. */
export function settledRows(t: TestRelay | Store, sink: string): Promise<Selectable<OutboxTable>[]> {
  return rowsOf(t, sink, ['delivered', 'discarded']);
}

function rowsOf(t: TestRelay | Store, sink: string, statuses: OutboxStatus[]): Promise<Selectable<OutboxTable>[]> {
  const store = 'relay' in t ? t.relay.store : t;
  return store.database.kysely.selectFrom('outbox').selectAll().where('sink', '=', sink).where('status', 'in', statuses).orderBy('id').execute();
}

/** Moves the test clock on by `ms` and wakes the dispatcher, so work scheduled within `ms` is claimed now. */
export function advanceAndWake(t: TestRelay, ms: number): void {
  t.clock.advance(ms);
  t.relay.fanout.wake();
}

/** A sink's pending work: its pending outbox rows and the routed events its cursors have not passed. */
export async function pendingCount(t: TestRelay | Store, sink: string): Promise<number> {
  const store = 'relay' in t ? t.relay.store : t;
  return (await createFanoutStore(store.database).exceptions.countBySink('pending'))[sink] ?? 0;
}

/**
 * The events a sink has not settled: its unsettled outbox rows (pending, dead letters, set aside)
 * and the routed deliveries its cursors have not passed (less those with an outbox row of the sink).
 */
export async function unfinishedIds(t: TestRelay | Store, sink: string): Promise<Set<string>> {
  const store = 'relay' in t ? t.relay.store : t;
  const { rows } = await sql<{ id: string }>`SELECT d.id FROM deliveries d JOIN log_cursors c ON c.sink = ${sink} AND c.part = d.part
    WHERE (d.seq IS NULL OR d.seq > c.seq) AND (',' || d.sinks || ',') LIKE ${`%,${sink},%`}
      AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.delivery_id = d.id AND o.sink = ${sink})`.execute(store.database.kysely);
  return new Set([...rows.map((row) => row.id), ...(await outboxRows(t, sink)).map((row) => row.delivery_id)]);
}

/** Every sink has read the whole log (its cursors at the head), as a dispatcher that handled every event leaves it. */
export async function readWholeLog(t: TestRelay | Store): Promise<void> {
  const store = 'relay' in t ? t.relay.store : t;
  await store.sequenceLog();
  const db = store.database.kysely;
  const head = await db.selectFrom('deliveries').select((eb) => eb.fn.max('seq').as('seq')).executeTakeFirstOrThrow();
  await db.updateTable('log_cursors').set({ seq: Number(head.seq) }).execute();
}

/** Log partitions some process holds (a lease not cleared): a process that stopped or was cleaned up after holds none. */
export async function heldPartitions(t: TestRelay | Store): Promise<{ sink: string; part: number; lease_owner: string | null }[]> {
  const store = 'relay' in t ? t.relay.store : t;
  return store.database.kysely.selectFrom('log_cursors').select(['sink', 'part', 'lease_owner']).where('lease_owner', 'is not', null).execute();
}

/** Waits until a sink has no work left (nothing pending in the outbox or its log, no dead letter). */
export async function allDelivered(t: TestRelay | Store, sink: string, timeoutMs?: number): Promise<void> {
  await waitFor(
    async () => (await outboxRows(t, sink)).length === 0 && (await pendingCount(t, sink)) === 0,
    `every ${sink} event to be delivered`,
    timeoutMs,
  );
}

/**
 * A stopped relay's work for a sink, read through a store of its own: the events it has not settled,
 * its unsettled outbox rows, and the log partitions still held (a clean stop leaves none).
 */
export async function storedWork(t: TestRelay, sink: string) {
  const store = await openStore({ url: t.config.database });
  try {
    return { unfinished: await unfinishedIds(store, sink), rows: await outboxRows(store, sink), held: await heldPartitions(store) };
  } finally {
    await store.close();
  }
}

/** A metric's value for the given labels (0 when absent). */
export async function metricValue(registry: Registry, name: string, labels: Record<string, string>): Promise<number> {
  const metric = registry.getSingleMetric(name);
  if (!metric) throw new Error(`no metric ${name}`);
  const { values } = await metric.get();
  const found = values.find((v) => Object.entries(labels).every(([k, value]) => v.labels[k] === value));
  return found?.value ?? 0;
}

/**
 * Per-test resources of the fan-out suites: hook servers and relays (fast timing, admin token)
 * that are closed after each test, last first, and `defer` for anything else.
 */
export function fanoutFixture() {
  const cleanups: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });
  const defer = (cleanup: () => Promise<unknown>) => void cleanups.push(async () => void (await cleanup()));
  return {
    defer,
    async server(...args: Parameters<typeof hookServer>): Promise<HookServer> {
      const s = await hookServer(...args);
      defer(() => s.close());
      return s;
    },
    /** `boxrelay serve` as its own process (the built CLI), killed at the end if still running. */
    async serve(env: Record<string, string>): Promise<RelayProcess> {
      const relay = await spawnRelay(env);
      defer(async () => {
        if (relay.child.exitCode === null && relay.child.signalCode === null) relay.child.kill('SIGKILL');
        await relay.exited;
      });
      return relay;
    },
    /** A relay, started unless `start: false`. */
    async relay(overrides: Record<string, unknown>, { start = true, ...options }: TestRelayOptions & { start?: boolean } = {}): Promise<TestRelay> {
      const t = await testRelay({ adminToken: ADMIN_TOKEN, ...overrides }, { dispatch: fastTuning, ...options });
      defer(() => t.close());
      if (start) await t.relay.start();
      return t;
    },
  };
}
