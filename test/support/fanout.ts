import type pg from 'pg';
import { parseEvent } from '../../src/events/parse-event.js';
import { partOf } from '../../src/store/log/position.js';
import type { NewException } from '../../src/store/exceptions/claims.js';
import { createFanoutStore, type FanoutStore } from '../../src/store/fanout-store.js';
import type { Store } from '../../src/store/store.js';
import type { Database } from '../../src/store/engines/database.js';
import { delivery, type DeliveryOptions } from './sign.js';

/** Stores one delivery through the receiver's real write path; returns its event id. */
export async function recordEvent(
  store: Store,
  options: { receivedAt: number; sinks: string[] } & Partial<DeliveryOptions>,
): Promise<string> {
  const d = delivery({ timestamp: Math.floor(options.receivedAt / 1000), ...options });
  await store.writer.record({ event: parseEvent(d.body, d.id), receivedAt: options.receivedAt, attempt: 1, sinks: options.sinks });
  return d.id;
}

/** The owner as which the tests write outbox rows of log entries, as a lane holding their partitions would. */
export const TEST_HOLDER = 'test-holder';

/**
 * Writes outbox rows of log entries as a lane does: each under the epoch of its partition, which
 * `TEST_HOLDER` takes (or renews) first. A partition another lane holds is not taken, and its rows
 * are refused: the count written is returned.
 */
export async function addRowsAsHolder(database: Database, fanout: FanoutStore, rows: NewException[], now = Date.now()): Promise<number> {
  let written = 0;
  for (const row of rows) {
    const { part } = await database.kysely.selectFrom('deliveries').select('part').where('id', '=', row.deliveryId).executeTakeFirstOrThrow();
    const { held } = await fanout.log.acquireParts({ sink: row.sink, owner: TEST_HOLDER, now, leaseMs: 3_600_000, readerTtlMs: 1, seenEpoch: 0, take: true });
    const epoch = held.find((h) => h.part === Number(part))?.epoch ?? -1;
    written += await fanout.exceptions.addExceptions([row], { part: Number(part), owner: TEST_HOLDER, epoch });
    // Given back at once: the lanes under test take the partitions, and no pause waits for this holder.
    await fanout.log.releaseParts({ sink: row.sink, owner: TEST_HOLDER, parts: held.map((h) => h.part) });
    await fanout.log.leave({ sink: row.sink, owner: TEST_HOLDER });
  }
  return written;
}

/**
 * Stores one delivery through the real write path, routed to no sink from the log, and gives each
 * of `sinks` a pending outbox row due at its arrival, as a replay leaves it: the work the outbox's
 * claims and leases are about.
 */
export async function recordWork(
  store: Store,
  options: { receivedAt: number; sinks: string[] } & Partial<DeliveryOptions>,
): Promise<string> {
  const id = await recordEvent(store, { ...options, sinks: [] });
  const { box_id: boxId } = await store.database.kysely.selectFrom('deliveries').select('box_id').where('id', '=', id).executeTakeFirstOrThrow();
  await addRowsAsHolder(
    store.database,
    createFanoutStore(store.database),
    options.sinks.map((sink) => ({
      deliveryId: id,
      sink,
      status: 'pending' as const,
      attempts: 0,
      nextAttemptAt: options.receivedAt,
      lastError: null,
      boxId,
      traceparent: null,
      now: options.receivedAt,
    })),
  );
  return id;
}

/** Resolves once `check` holds, polling the (real) state it reads; fails with `what` after `timeoutMs`. */
export async function waitFor<T>(check: () => T | Promise<T>, what: string, timeoutMs = 15_000): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value) return value as NonNullable<T>;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** The PostgreSQL server's clock (epoch ms), for a test that sets the relay's own clock apart from it. */
export async function databaseNowMs(client: pg.Client): Promise<number> {
  const { rows } = await client.query<{ now: string }>(`SELECT floor(extract(epoch from clock_timestamp()) * 1000)::bigint AS now`);
  return Number(rows[0]?.now);
}

/**
 * A delivery as another process stores it on PostgreSQL, through `client` (inside its transaction if
 * one is open): routed to `sinks`, without a log position until a sequencer numbers it.
 */
export async function storeUnnumbered(client: pg.Client, { id, boxId, receivedAt, sinks = 'h' }: { id: string; boxId: string; receivedAt: number; sinks?: string }): Promise<void> {
  await client.query(
    `INSERT INTO deliveries (id, type, box_id, created_at, received_at, attempt, payload, part, sinks)
     VALUES ($1, 'box.ready', $2, '2026-11-26T10:00:00.000Z', $3, 1, '{}', $4, $5)`,
    [id, boxId, receivedAt, partOf(boxId), sinks],
  );
}

/** The backlogs by their definition, from the whole tables: routed entries past the cursor or unnumbered, without a row of the sink. */
export async function backlogsByDefinition(database: Database): Promise<Record<string, number>> {
  const db = database.kysely;
  const deliveries = await db.selectFrom('deliveries').select(['id', 'part', 'seq', 'sinks']).execute();
  const cursors = await db.selectFrom('log_cursors').select(['sink', 'part', 'seq']).execute();
  const rows = new Set((await db.selectFrom('outbox').select(['delivery_id', 'sink']).execute()).map((r) => `${r.delivery_id} ${r.sink}`));
  const counts: Record<string, number> = {};
  for (const sink of new Set(cursors.map((c) => c.sink))) {
    const cursorOf = (part: number) => cursors.find((c) => c.sink === sink && c.part === part);
    counts[sink] = deliveries.filter((d) => {
      if (!(d.sinks ?? '').split(',').includes(sink) || rows.has(`${d.id} ${sink}`)) return false;
      if (d.seq === null) return true;
      const cursor = cursorOf(d.part);
      return cursor !== undefined && Number(d.seq) > Number(cursor.seq);
    }).length;
  }
  return counts;
}
