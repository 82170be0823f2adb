import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { beforeAll, describe, expect, it } from 'vitest';
import { postgresSchema } from './support/databases.js';
import { waitFor } from './support/fanout.js';
import { fanoutFixture } from './support/fanout-relay.js';
import { allSettled, leasedWork } from './support/leased-work.js';
import type { HookAnswer } from './support/hook-server.js';
import { SHARED_NATS, collect, natsClient, uniqueNames } from './support/nats.js';
import { requireBuild, type RelayProcess } from './support/process.js';
import { parseExposition, valueOf } from './support/prometheus.js';
import { SECRET, delivery, type Delivery } from './support/sign.js';

/**
 * Issue #5, scale-out on PostgreSQL: two `boxrelay serve` processes on one schema, one NATS stream
 * and one hook, fed the same deliveries in random order, with duplicates, to either replica.
 */

const EVENTS = 500;
const IN_FLIGHT = 20;
/** Short, so the rows of a killed replica are sent by the other within seconds. */
const LEASE_MS = 2000;
/** The first replica is killed once it has answered this many 200s. */
const KILL_AFTER = 200;

beforeAll(requireBuild);
const { defer, server, serve } = fanoutFixture();

/** A small seeded PRNG (mulberry32): a failure names its seed, so the order can be replayed. */
function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = Math.imul(a ^ (a >>> 15), a | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

interface Send {
  delivery: Delivery;
  /** The replica it is sent to first. */
  replica: number;
}

/** Each event 1-3 times, each copy to a random replica, all copies shuffled. */
function plan(rand: () => number): { deliveries: Delivery[]; sends: Send[] } {
  const now = Math.floor(Date.now() / 1000);
  const deliveries = Array.from({ length: EVENTS }, (_, i) => delivery({ timestamp: now, boxId: `bx_${i % 50}`, boxName: `box-${i % 50}` }));
  const sends = deliveries.flatMap((d) => Array.from({ length: 1 + Math.floor(rand() * 3) }, () => ({ delivery: d, replica: Math.floor(rand() * 2) })));
  for (let i = sends.length - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1));
    [sends[i], sends[j]] = [sends[j]!, sends[i]!];
  }
  return { deliveries, sends };
}

/** Runs `run` over `items` with at most `limit` under way. */
async function bounded<T>(items: T[], limit: number, run: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(Array.from({ length: limit }, async () => {
    while (next < items.length) await run(items[next++]!);
  }));
}

interface Answer {
  id: string;
  replica: number;
  status: number;
  duplicate: boolean | undefined;
}

async function post(relay: RelayProcess, d: Delivery): Promise<{ status: number; duplicate: boolean | undefined }> {
  const res = await fetch(`http://127.0.0.1:${relay.port}/webhooks`, {
    method: 'POST',
    headers: d.headers,
    body: d.body,
    signal: AbortSignal.timeout(15_000),
  });
  const body = (await res.json()) as { duplicate?: boolean };
  return { status: res.status, duplicate: body.duplicate };
}

/** Two replicas on a fresh schema, a stream and subjects of their own, one hook; all torn down after the test. */
async function replicas(env: Record<string, string> = {}, hookAnswer: HookAnswer = 200, hookTimeoutMs = 1000) {
  const { prefix, stream } = uniqueNames();
  const nats = await natsClient();
  nats.streams.push(stream);
  defer(() => nats.close());
  // Core subscribers see every publish, also one JetStream drops as a duplicate.
  const published = collect(nats.nc, `${prefix}.>`);
  await nats.nc.flush();
  const hook = await server(() => hookAnswer);
  const dir = mkdtempSync(join(tmpdir(), 'boxrelay-replicas-'));
  writeFileSync(join(dir, 'hooks.yaml'), `- name: h\n  url: ${hook.url}\n  timeoutMs: ${hookTimeoutMs}\n  concurrency: 4\n`);
  const database = await postgresSchema();
  const relayEnv = {
    BOXRELAY_SECRETS: SECRET,
    BOXRELAY_DATABASE: database,
    BOXRELAY_NATS_URL: SHARED_NATS,
    BOXRELAY_NATS_SUBJECT_PREFIX: prefix,
    BOXRELAY_NATS_STREAM: stream,
    BOXRELAY_HOOKS_FILE: join(dir, 'hooks.yaml'),
    BOXRELAY_OUTBOX_POLL_MS: '200',
    ...env,
  };
  const relays = await Promise.all([serve(relayEnv), serve(relayEnv)]);
  const db = new pg.Client(database);
  await db.connect();
  defer(() => db.end());
  const query = async <R>(text: string, params: unknown[] = []): Promise<R[]> => (await db.query(text, params)).rows as R[];

  return {
    relays,
    hook,
    published,
    query,
    storedIds: async () => (await query<{ id: string }>('SELECT id FROM deliveries')).map((r) => r.id),
    /** Every fan-out row is delivered (none pending, none dead). */
    allDone: () => allSettled(db),
    /** The event ids in the stream, one per stored message. */
    async streamIds(): Promise<string[]> {
      const { state } = await nats.jsm.streams.info(stream);
      const ids: string[] = [];
      for (let seq = state.first_seq; seq <= state.last_seq; seq++) {
        ids.push((await nats.jsm.streams.getMessage(stream, { seq }))!.header.get('Nats-Msg-Id'));
      }
      return ids;
    },
    /** Work left under the lease of a process: its leased rows and the events past its partitions' cursors. */
    leasedBy: (relay: RelayProcess) => leasedWork(db, relay),
    /** SIGTERM: resolves with the exit code (0 when the stop was clean). */
    stop: async (relay: RelayProcess) => {
      relay.child.kill('SIGTERM');
      return relay.exited;
    },
  };
}

/** `boxrelay_sink_deliveries_total{outcome}` of one replica, by sink. */
async function attempts(relay: RelayProcess, outcome: 'delivered' | 'retried'): Promise<{ nats: number; h: number }> {
  const text = await (await fetch(`http://127.0.0.1:${relay.internalPort}/metrics`)).text();
  const of = (sink: string) => valueOf(parseExposition(text), 'boxrelay_sink_deliveries_total', { sink, outcome }) ?? 0;
  return { nats: of('nats'), h: of('h') };
}
const delivered = (relay: RelayProcess) => attempts(relay, 'delivered');

/** Log lines at level error or fatal. */
const errors = (relay: RelayProcess) => relay.lines.filter((line) => /"level":(50|60)/.test(line));
const hookIds = (hook: { requests: { headers: Record<string, unknown> }[] }) => hook.requests.map((r) => r.headers['webhook-id'] as string);
const msgIds = (published: ReturnType<typeof collect>) => published.messages.map((m) => m.headers!.get('Nats-Msg-Id'));
const repeated = (ids: string[]) => ids.filter((id, i) => ids.indexOf(id) !== i);

describe('two relay processes on one PostgreSQL schema', () => {
  it('store and fan out each of 500 events once, sent 1-3 times each to either replica', { timeout: 60_000 }, async () => {
    const seed = Date.now();
    const { deliveries, sends } = plan(random(seed));
    const ids = deliveries.map((d) => d.id).sort();
    // A hook call that times out is sent again (at least once): on a busy machine a 1 s timeout would
    // make copies this test does not count on.
    const r = await replicas({}, 200, 15_000);

    const answers: Answer[] = [];
    await bounded(sends, IN_FLIGHT, async ({ delivery: d, replica }) => {
      const { status, duplicate } = await post(r.relays[replica]!, d);
      answers.push({ id: d.id, replica, status, duplicate });
    });

    const context = `seed ${seed}`;
    expect(answers, context).toHaveLength(sends.length);
    expect(answers.filter((a) => a.status !== 200), context).toEqual([]);
    const firsts = answers.filter((a) => a.duplicate === false).map((a) => a.id);
    expect(firsts.sort(), `one duplicate:false per event (${context})`).toEqual(ids);
    expect(new Set(answers.map((a) => a.replica)), context).toEqual(new Set([0, 1]));
    expect((await r.storedIds()).sort(), context).toEqual(ids);

    await waitFor(r.allDone, 'every fan-out row to be delivered', 30_000);
    expect((await r.streamIds()).sort(), context).toEqual(ids);
    expect(msgIds(r.published).sort(), `each event published once (${context})`).toEqual(ids);
    // A copy after a retried attempt is at least once; one without is a read of the log by both replicas.
    const retried = await Promise.all(r.relays.map((relay) => attempts(relay, 'retried')));
    expect(hookIds(r.hook).sort(), `each event sent to the hook once (${context}; retried: ${JSON.stringify(retried)})`).toEqual(ids);
    // Together the replicas delivered each event once. Which replica claims which row is a race (either
    // may claim all of a sink's rows while the other is busy), so no share per replica is asserted.
    const [a, b] = await Promise.all(r.relays.map(delivered));
    expect({ nats: a!.nats + b!.nats, h: a!.h + b!.h }, context).toEqual({ nats: EVENTS, h: EVENTS });

    expect(await Promise.all(r.relays.map(r.stop))).toEqual([0, 0]);
    expect(r.relays.flatMap(errors)).toEqual([]);
  });

  it('lose nothing when one is SIGKILLed mid-run: the other sends its leased rows once the lease runs out', { timeout: 60_000 }, async () => {
    const seed = Date.now();
    const { deliveries, sends } = plan(random(seed));
    const ids = deliveries.map((d) => d.id).sort();
    // The hook takes a little time, so the replica killed always has calls in flight (leases held).
    const r = await replicas({ BOXRELAY_OUTBOX_LEASE_MS: String(LEASE_MS) }, { status: 200, delayMs: 25 });
    const [a, b] = r.relays as [RelayProcess, RelayProcess];

    const answers: Answer[] = [];
    let killedAt: number | undefined;
    let orphans: Promise<{ delivery_id: string; sink: string }[]> | undefined;
    let failedOnA = 0;
    let okFromA = 0;
    await bounded(sends, IN_FLIGHT, async ({ delivery: d, replica }) => {
      if (replica === 0 && killedAt === undefined) {
        try {
          const { status, duplicate } = await post(a, d);
          answers.push({ id: d.id, replica, status, duplicate });
          if (status === 200 && ++okFromA === KILL_AFTER) {
            killedAt = Date.now();
            a.child.kill('SIGKILL');
            // What the dead process held, read before its leases can run out.
            orphans = a.exited.then(() => r.leasedBy(a));
          }
          return;
        } catch (error) {
          // Only a request cut by the kill (fetch's TypeError) is sent again to the survivor, as a
          // sender would; any other failure, or one before the kill, is the test's to see.
          if (killedAt === undefined || !(error instanceof TypeError)) throw error;
          failedOnA++;
        }
      }
      const { status, duplicate } = await post(b, d);
      answers.push({ id: d.id, replica: 1, status, duplicate });
    });

    const context = `seed ${seed}`;
    expect(killedAt, context).toBeDefined();
    expect(a.child.signalCode).toBe('SIGKILL');
    expect(answers.filter((x) => x.status !== 200), context).toEqual([]);
    // Answers already on their way when the signal landed still count: they were committed first.
    expect(answers.filter((x) => x.replica === 0).length, context).toBeGreaterThanOrEqual(KILL_AFTER);
    // Only requests already in flight at the kill can fail on A (the one that triggered it did not).
    expect(failedOnA, context).toBeLessThanOrEqual(IN_FLIGHT - 1);
    expect(answers.filter((x) => x.replica === 1).length, context).toBeGreaterThanOrEqual(failedOnA);
    expect([...new Set(answers.map((x) => x.id))].sort(), `every event got a 200 (${context})`).toEqual(ids);
    // A copy stored by the killed replica just before its answer was lost is a duplicate for the survivor.
    const firsts = answers.filter((x) => x.duplicate === false).map((x) => x.id);
    expect(repeated(firsts), `never two duplicate:false for one event (${context})`).toEqual([]);
    expect((await r.storedIds()).sort(), context).toEqual(ids);

    await waitFor(r.allDone, 'every fan-out row to be delivered', 30_000);
    const left = await orphans!;
    expect(left.length, `the killed replica held leases (${context})`).toBeGreaterThan(0);
    const held = (sink: string) => new Set(left.filter((o) => o.sink === sink).map((o) => o.delivery_id));

    // NATS: each event in the stream once; a re-publish of a row the dead replica held is dropped by Nats-Msg-Id.
    expect((await r.streamIds()).sort(), context).toEqual(ids);
    const republished = repeated(msgIds(r.published));
    expect(republished.filter((id) => !held('nats').has(id)), context).toEqual([]);
    // The hook: each event at least once; a second copy only of a row the dead replica held.
    const received = hookIds(r.hook);
    expect([...new Set(received)].sort(), context).toEqual(ids);
    const twice = repeated(received);
    expect(twice.filter((id) => !held('h').has(id)), context).toEqual([]);
    // Sent again by the survivor after the kill, once the dead replica's lease ran out.
    const copies = (id: string) => r.hook.requests.filter((q) => q.headers['webhook-id'] === id).map((q) => q.at);
    const gaps = twice.map((id) => {
      const [first, second] = copies(id) as [number, number];
      expect(second, context).toBeGreaterThanOrEqual(killedAt!);
      return second - first;
    });
    console.info(
      `replicas kill (${context}): ${failedOnA} requests failed on the killed replica and were sent to the other; ` +
        `it held ${held('h').size} hook and ${held('nats').size} NATS rows; the hook got ${twice.length} second copies ` +
        `(${gaps.length ? `${Math.min(...gaps)}-${Math.max(...gaps)} ms after the first` : 'none'}), ` +
        `NATS ${republished.length} re-publishes (dropped by the stream); all done ${Date.now() - killedAt!} ms after the kill`,
    );

    expect(await r.stop(b)).toBe(0);
    expect(errors(b)).toEqual([]);
  });

  it('hand a SIGKILLed replica\'s partitions and claims to the other within 10 s, with the default leases', { timeout: 60_000 }, async () => {
    // No configured lease: each sink's would be a minute (its attempts' longest run); held ones are renewed instead.
    const r = await replicas({}, { status: 200, delayMs: 25 });
    const [a, b] = r.relays as [RelayProcess, RelayProcess];
    const now = Math.floor(Date.now() / 1000);
    const events = Array.from({ length: 300 }, (_, i) => delivery({ timestamp: now, boxId: `bx_${i % 40}` }));
    for (const d of events.slice(0, 200)) expect((await post(a, d)).status).toBe(200);
    a.child.kill('SIGKILL');
    await a.exited;
    // What the dead process held and how long its leases still run, by the database's clock.
    const owner = `%:${a.child.pid}:%`;
    const leases = await r.query<{ left_ms: string | null }>(
      `SELECT max(lease_until) - floor(extract(epoch from clock_timestamp()) * 1000) AS left_ms FROM
        (SELECT lease_until FROM log_cursors WHERE lease_owner LIKE $1 UNION ALL SELECT lease_until FROM outbox WHERE lease_owner LIKE $1) held`,
      [owner],
    );
    expect(leases[0]?.left_ms, 'the killed replica held leases').not.toBeNull();
    expect(Number(leases[0]!.left_ms)).toBeLessThanOrEqual(10_000);
    for (const d of events.slice(200)) expect((await post(b, d)).status).toBe(200);
    await waitFor(r.allDone, 'every fan-out row to be delivered', 30_000);
    expect([...new Set(hookIds(r.hook))].sort()).toEqual(events.map((d) => d.id).sort());
    expect(await r.stop(b)).toBe(0);
  });
});
