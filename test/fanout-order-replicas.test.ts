import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { beforeAll, describe, expect, it } from 'vitest';
import { postgresSchema } from './support/databases.js';
import { waitFor } from './support/fanout.js';
import { fanoutFixture } from './support/fanout-relay.js';
import { allSettled, leasedWork } from './support/leased-work.js';
import { requireBuild, type RelayProcess } from './support/process.js';
import { SECRET, delivery } from './support/sign.js';

beforeAll(requireBuild);
const { defer, server, serve } = fanoutFixture();

const BOXES = 10;
const PER_BOX = 6;

async function post(relay: RelayProcess, boxId: string, seconds: number): Promise<string> {
  const d = delivery({ boxId, timestamp: seconds });
  const res = await fetch(`http://127.0.0.1:${relay.port}/webhooks`, { method: 'POST', headers: d.headers, body: d.body, signal: AbortSignal.timeout(10_000) });
  expect(res.status).toBe(200);
  return d.id;
}

/**
 * Two relays on one PostgreSQL schema with a per-box hook (attempt timeout `timeoutMs`), leases short
 * enough that a replica that dies or stalls has its work taken over within seconds; and a client.
 */
async function twoReplicas(hookUrl: string, timeoutMs: number): Promise<{ a: RelayProcess; b: RelayProcess; db: pg.Client }> {
  const dir = mkdtempSync(join(tmpdir(), 'boxrelay-replicas-'));
  writeFileSync(join(dir, 'hooks.yaml'), `- name: h\n  url: ${hookUrl}\n  ordering: per-box\n  concurrency: 8\n  timeoutMs: ${timeoutMs}\n`);
  const database = await postgresSchema();
  const env = {
    BOXRELAY_SECRETS: SECRET,
    BOXRELAY_DATABASE: database,
    BOXRELAY_HOOKS_FILE: join(dir, 'hooks.yaml'),
    BOXRELAY_OUTBOX_POLL_MS: '100',
    BOXRELAY_OUTBOX_LEASE_MS: '2000',
  };
  const [a, b] = (await Promise.all([serve(env), serve(env)])) as [RelayProcess, RelayProcess];
  const db = new pg.Client(database);
  await db.connect();
  defer(() => db.end());
  return { a, b, db };
}

describe('per-box order across two replicas on PostgreSQL', () => {
  it('holds when one replica is SIGKILLed mid-run: each box its events in accepted order, none lost', { timeout: 60_000 }, async () => {
    // Until the kill the hook takes its time (within the attempt timeout), so the replica that dies
    // holds rows with requests in flight; then it answers quickly.
    const arrivals: { id: string; box: string }[] = [];
    let slow = true;
    const hook = await server((req) => {
      const event = JSON.parse(req.body) as { id: string; subject: string };
      arrivals.push({ id: event.id, box: event.subject });
      return { status: 200, delayMs: slow ? 400 : 15 };
    });
    const { a, b, db } = await twoReplicas(hook.url, 1000);
    /** Work under a live lease of `relay`: its leased rows and the events past its partitions' cursors. */
    const heldBy = async (relay: RelayProcess): Promise<string[]> => (await leasedWork(db, relay, { live: true })).map((r) => r.delivery_id);
    let heldWhenKilled: string[] = [];
    let arrivedBeforeKill = 0;

    // Accepted order is the order of the answers: each post is awaited, alternating replicas.
    const accepted = new Map<string, string[]>();
    const seconds = Math.floor(Date.now() / 1000);
    for (let i = 0; i < PER_BOX; i++) {
      for (let box = 0; box < BOXES; box++) {
        const boxId = `bx_${box}`;
        const survivor = i >= PER_BOX / 2 || (i * BOXES + box) % 2 === 1;
        const id = await post(survivor ? b : a, boxId, seconds);
        accepted.set(boxId, [...(accepted.get(boxId) ?? []), id]);
      }
      // Mid-run: A dies with work leased and requests to the hook in flight.
      if (i === PER_BOX / 2 - 1) {
        await waitFor(async () => (await heldBy(a)).length > 0, 'replica A to hold leased work');
        a.child.kill('SIGKILL');
        await a.exited;
        // Nothing settles a dead replica's rows: they stay under its lease until it runs out.
        heldWhenKilled = await heldBy(a);
        arrivedBeforeKill = arrivals.length;
        slow = false;
      }
    }
    expect(heldWhenKilled.length).toBeGreaterThan(0);

    await waitFor(() => allSettled(db), 'every event to be delivered', 30_000);
    // The killed replica's rows were taken over and sent by the survivor.
    const sentAfterKill = new Set(arrivals.slice(arrivedBeforeKill).map((x) => x.id));
    expect(heldWhenKilled.filter((id) => !sentAfterKill.has(id))).toEqual([]);

    // At least once: the killed replica's calls in flight may arrive twice. First arrivals keep the order.
    const firstArrivals = new Map<string, string[]>();
    const seen = new Set<string>();
    for (const { id, box } of arrivals) {
      if (seen.has(id)) continue;
      seen.add(id);
      firstArrivals.set(box, [...(firstArrivals.get(box) ?? []), id]);
    }
    expect(firstArrivals).toEqual(accepted);
    // A repeat is only ever an immediate re-send of the box's latest event, never an older one after a newer.
    for (const [box, ids] of accepted) {
      const order = arrivals.filter((x) => x.box === box).map((x) => ids.indexOf(x.id));
      for (let i = 1; i < order.length; i++) expect(order[i]!).toBeGreaterThanOrEqual(order[i - 1]!);
    }
    expect(await new Promise((resolve) => { b.child.once('exit', resolve); b.child.kill('SIGTERM'); })).toBe(0);
  });

  it('holds when one replica is stopped (SIGSTOP) past its leases and continues: it starts nothing it no longer holds', { timeout: 90_000 }, async () => {
    // Each request's span at the hook, to find two requests for one box at once.
    const requests: { id: string; box: string; start: number; end: number }[] = [];
    let delayMs = 300;
    const hook = await server((req) => {
      const event = JSON.parse(req.body) as { id: string; subject: string };
      const start = performance.now();
      requests.push({ id: event.id, box: event.subject, start, end: start + delayMs });
      return { status: 200, delayMs };
    });
    const { a, b, db } = await twoReplicas(hook.url, 5000);
    const accepted = new Map<string, string[]>();
    const seconds = Math.floor(Date.now() / 1000);
    const postRound = async (relay: RelayProcess) => {
      for (let box = 0; box < BOXES; box++) {
        const boxId = `bx_${box}`;
        accepted.set(boxId, [...(accepted.get(boxId) ?? []), await post(relay, boxId, seconds)]);
      }
    };

    // A holds leased work, with the rest of its boxes' events read ahead behind requests in flight.
    for (let i = 0; i < PER_BOX; i++) await postRound(a);
    await waitFor(async () => (await leasedWork(db, a, { live: true })).length > 0, 'replica A to hold leased work');
    a.child.kill('SIGSTOP');
    const stoppedAt = requests.length;
    // Its leases run out; B takes its work over, sends it and moves past with newer events.
    await waitFor(() => allSettled(db), 'replica B to deliver what A held', 30_000);
    for (let i = 0; i < 2; i++) await postRound(b);
    await waitFor(() => allSettled(db), 'replica B to deliver the newer events', 30_000);
    expect(requests.length).toBeGreaterThan(stoppedAt);

    a.child.kill('SIGCONT');
    // A works again (what it is given now is delivered): whatever it had under way when stopped has had its turn by then.
    delayMs = 15;
    await postRound(a);
    // Before the fix A wrote its timed-out attempts down as retries of events B had delivered, sent
    // 25-35 s later after the box's newer events: this wait then ran out.
    await waitFor(() => allSettled(db), 'every event to be delivered once A continued', 30_000);

    for (const [box, ids] of accepted) {
      const forBox = requests.filter((r) => r.box === box);
      // One at a time: no request for the box started before the one before it was answered.
      for (let i = 1; i < forBox.length; i++) expect(forBox[i]!.start, `${box}: request ${i} overlapped the one before`).toBeGreaterThanOrEqual(forBox[i - 1]!.end - 1);
      // In accepted order; a repeat only ever the box's latest event again, never an older one after a newer.
      const order = forBox.map((r) => ids.indexOf(r.id));
      for (let i = 1; i < order.length; i++) expect(order[i]!, `${box}: ${JSON.stringify(order)}`).toBeGreaterThanOrEqual(order[i - 1]!);
      expect(new Set(order)).toEqual(new Set(ids.map((_, i) => i)));
    }
    for (const relay of [a, b]) expect(await new Promise((resolve) => { relay.child.once('exit', resolve); relay.child.kill('SIGTERM'); })).toBe(0);
  });
});
