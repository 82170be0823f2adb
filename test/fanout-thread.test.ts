// The fan-out in its worker thread (BOXRELAY_FANOUT_THREAD=worker), through the built CLI as users
// run it: the worker's sinks deliver, its metrics and NATS status reach the main thread's /metrics
// and /readyz, admin pauses reach it, and neither a SIGTERM under load nor a crash of the worker
// (made through the inspector) loses anything or leaves rows leased; a worker that hangs does not keep the process from exiting;
// the worker runs at a lower CPU priority than the threads that answer webhooks.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { openStore, type Store } from '../src/store/store.js';
import { ADMIN_TOKEN, fetchAdmin } from './support/admin.js';
import { postgresSchema } from './support/databases.js';
import { fanoutFixture, heldPartitions, outboxRows, unfinishedIds } from './support/fanout-relay.js';
import { waitFor } from './support/fanout.js';
import type { HookServer } from './support/hook-server.js';
import { evaluateInFanoutWorker, exitFanoutWorker, hangFanoutWorker, inspectorUrlIn } from './support/inspector.js';
import { SHARED_NATS, natsClient, uniqueNames } from './support/nats.js';
import { logLines, requireBuild, type RelayProcess } from './support/process.js';
import { SECRET, delivery } from './support/sign.js';
import { threadsOf } from './support/threads.js';

beforeAll(requireBuild);

const { defer, server, serve } = fanoutFixture();

/** A relay process in worker mode with NATS (its own stream) and the given hooks; killed at the end if still running. */
async function workerRelay(hooks: Record<string, HookServer>, extraEnv: Record<string, string> = {}) {
  const { prefix, stream } = uniqueNames();
  const nats = await natsClient();
  nats.streams.push(stream);
  defer(() => nats.close());
  const dir = mkdtempSync(join(tmpdir(), 'boxrelay-thread-'));
  writeFileSync(join(dir, 'hooks.yaml'), Object.entries(hooks).map(([name, hook]) => `- name: ${name}\n  url: ${hook.url}\n`).join(''));
  const env = {
    BOXRELAY_FANOUT_THREAD: 'worker',
    BOXRELAY_SECRETS: SECRET,
    BOXRELAY_DATABASE: join(dir, 'relay.db'),
    BOXRELAY_NATS_URL: SHARED_NATS,
    BOXRELAY_NATS_SUBJECT_PREFIX: prefix,
    BOXRELAY_NATS_STREAM: stream,
    BOXRELAY_HOOKS_FILE: join(dir, 'hooks.yaml'),
    BOXRELAY_ADMIN_TOKEN: ADMIN_TOKEN,
    ...extraEnv,
  };
  const start = async (): Promise<RelayProcess> => {
    const relay = await serve(env);
    await waitFor(async () => (await readyz(relay)).checks?.nats === 'ok', `NATS to be ok in /readyz (${relay.lines.join('\n')})`);
    return relay;
  };
  const inStream = async (): Promise<Set<string>> => {
    const { messages } = (await nats.jsm.streams.info(stream)).state;
    const ids = new Set<string>();
    for (let seq = 1; seq <= messages; seq++) ids.add((await nats.jsm.streams.getMessage(stream, { seq }))!.header.get('Nats-Msg-Id'));
    return ids;
  };
  return { env, start, inStream, streamCount: async () => (await nats.jsm.streams.info(stream)).state.messages };
}

/**
 * BOXRELAY_FANOUT_NICENESS=10: the fan-out yields the cores to the threads answering webhooks, its
 * worker alone 10 nicer than the main thread (at most 19), every other thread (storage, checkpointer,
 * libuv's pool) as main. The worker's thread is named `fanout` (what `top -H` shows and the bench reads).
 */
async function expectFanoutNicer(relay: RelayProcess): Promise<void> {
  const pid = relay.child.pid!;
  const read = () => {
    const byThread = threadsOf(pid);
    const main = byThread.get(pid)!.niceness;
    return { main, others: [...byThread.values()].filter(({ niceness }) => niceness !== main) };
  };
  // The worker raises it as it starts, beside its other start-up work.
  await waitFor(async () => read().others.length > 0, 'a thread of the relay nicer than its main thread');
  const { main, others } = read();
  expect(others).toEqual([{ name: 'fanout', niceness: Math.min(19, main + 10) }]);
}

async function readyz(relay: RelayProcess): Promise<{ checks?: Record<string, string> }> {
  // The relay listens before it is returned: a failed request is a fault, not a wait.
  const res = await fetch(`http://127.0.0.1:${relay.internalPort}/readyz`);
  return (await res.json()) as { checks?: Record<string, string> };
}

/** Posts one signed delivery; its id and status. */
async function post(relay: RelayProcess, boxId = 'bx_thread'): Promise<{ id: string; status: number }> {
  const d = delivery({ timestamp: Math.floor(Date.now() / 1000), boxId });
  const res = await fetch(`http://127.0.0.1:${relay.port}/webhooks`, { method: 'POST', headers: d.headers, body: d.body });
  await res.arrayBuffer();
  return { id: d.id, status: res.status };
}

/** Posts `count` deliveries, each of which must be answered 200, adding their ids to `posted`. */
async function postAccepted(relay: RelayProcess, count: number, posted: string[] = []): Promise<string[]> {
  for (let i = 0; i < count; i++) {
    const { id, status } = await post(relay, `bx_${posted.length}`);
    expect(status).toBe(200);
    posted.push(id);
  }
  return posted;
}

async function metrics(relay: RelayProcess): Promise<string> {
  return (await fetch(`http://127.0.0.1:${relay.internalPort}/metrics`)).text();
}

const admin = (relay: RelayProcess, path: string) => fetchAdmin(relay.internalPort, 'POST', path);

const adminGet = async (relay: RelayProcess, path: string): Promise<unknown> => (await fetchAdmin(relay.internalPort, 'GET', path)).body;

/** `GET /admin/sinks`: each sink's pending rows. */
async function pendingBySink(relay: RelayProcess): Promise<Record<string, number>> {
  const { sinks } = (await fetchAdmin(relay.internalPort, 'GET', '/sinks')).body as { sinks: { name: string; pending: number }[] };
  return Object.fromEntries(sinks.map((sink) => [sink.name, sink.pending]));
}

async function openDatabase(url: string): Promise<Store> {
  const store = await openStore({ url });
  defer(() => store.close());
  return store;
}

// Each test starts relay processes and loads them: about 10 s on a quiet machine, past 30 s on a busy one.
describe('fan-out in a worker thread', { timeout: 90_000 }, () => {
  it('delivers to NATS and a hook; /metrics has the worker’s counts, /readyz its NATS status; a pause and a resume reach it at once', async () => {
    const [alpha, beta] = [await server(), await server()];
    // A poll of a minute: the worker learns of the pause and the resume only from the main thread's messages.
    const { start, inStream } = await workerRelay({ alpha, beta }, { BOXRELAY_OUTBOX_POLL_MS: '60000', BOXRELAY_FANOUT_NICENESS: '10' });
    const relay = await start();
    expect(await readyz(relay)).toMatchObject({ checks: { nats: 'ok' } });
    await expectFanoutNicer(relay);

    // A first delivery, so every lane has read its (unpaused) sink state before the pause.
    const first = await post(relay);
    expect(first.status).toBe(200);
    await beta.received(1);

    expect((await admin(relay, '/sinks/beta/pause')).status).toBe(200);
    const posted = [first.id];
    for (let i = 0; i < 20; i++) {
      const { id, status } = await post(relay, `bx_${i}`);
      expect(status).toBe(200);
      posted.push(id);
    }
    await alpha.received(21);
    // NATS also has the operator event of the pause.
    await waitFor(async () => {
      const ids = await inStream();
      return posted.every((id) => ids.has(id));
    }, 'NATS to hold all 21');
    expect(new Set(alpha.requests.map((r) => r.headers['webhook-id']))).toEqual(new Set(posted));
    // The counts reach /metrics in the worker's next report.
    await waitFor(async () => /boxrelay_sink_deliveries_total\{sink="alpha",outcome="delivered"\} 21\n/.test(await metrics(relay)), 'alpha delivered 21 in /metrics');
    // NATS: the 21 and the operator event of the pause.
    await waitFor(async () => /boxrelay_sink_deliveries_total\{sink="nats",outcome="delivered"\} 22\n/.test(await metrics(relay)), 'NATS delivered 22 in /metrics');
    const text = await metrics(relay);
    expect(text).toMatch(/boxrelay_sink_delivery_duration_seconds_count\{sink="nats"\} 22\n/);
    expect(text).toMatch(/boxrelay_sink_up\{sink="nats"\} 1\n/);
    // Paused: the 20 wait for beta, nothing was sent to it.
    expect(text).toMatch(/boxrelay_outbox_pending\{sink="beta"\} 20\n/);
    expect(beta.requests).toHaveLength(1);

    expect((await admin(relay, '/sinks/beta/resume')).status).toBe(200);
    await beta.received(21);
    expect(new Set(beta.requests.map((r) => r.headers['webhook-id']))).toEqual(new Set(posted));
    // The worker's counts reach the stats (contract section 15) through its reports; the audit trail has who paused and resumed.
    await waitFor(async () => {
      const { buckets } = (await adminGet(relay, '/stats?bucket=1h')) as { buckets: { delivered: Record<string, number> }[] };
      const delivered = (sink: string) => buckets.reduce((sum, b) => sum + (b.delivered[sink] ?? 0), 0);
      return delivered('alpha') === 21 && delivered('beta') === 21;
    }, 'the stats to count 21 deliveries to alpha and to beta');
    const { audit } = (await adminGet(relay, '/audit')) as { audit: { action: string; target: string; by: string }[] };
    expect(audit.map(({ action, target, by }) => [action, target, by])).toEqual([['resume', 'beta', '127.0.0.1'], ['pause', 'beta', '127.0.0.1']]);

    relay.child.kill('SIGTERM');
    expect(await relay.exited).toBe(0);
    // The worker's lines (its NATS sink's) reach stdout through the main thread's one writer: every line whole.
    expect(relay.lines.some((line) => line.includes('"sink":"nats"') && line.includes('JetStream stream'))).toBe(true);
    for (const line of logLines(relay)) expect(() => JSON.parse(line), line).not.toThrow();
  });

  it('a SIGTERM under load: every 200 is stored, its rows released, and all arrive at NATS and the hook after a restart', async () => {
    // A slow hook, so work is still waiting when the relay stops.
    const slow = await server(() => ({ status: 200, delayMs: 50 }));
    const { env, start, inStream, streamCount } = await workerRelay({ slow }, { BOXRELAY_OUTBOX_POLL_MS: '200' });
    const first = await start();

    const accepted: string[] = [];
    let sending = true;
    const senders = Array.from({ length: 8 }, async (_, sender) => {
      for (let i = 0; sending; i++) {
        const result = await post(first, `bx_${sender}_${i}`).catch(() => undefined);
        if (result?.status === 200) accepted.push(result.id);
        if (!result || result.status !== 200) return;
      }
    });
    await waitFor(() => accepted.length >= 100, 'a hundred deliveries accepted');
    first.child.kill('SIGTERM');
    expect(await first.exited).toBe(0);
    sending = false;
    await Promise.all(senders);

    const store = await openDatabase(env.BOXRELAY_DATABASE);
    const stored = new Set((await store.database.kysely.selectFrom('deliveries').select('id').execute()).map((d) => d.id));
    expect(accepted.every((id) => stored.has(id))).toBe(true);
    expect((await unfinishedIds(store, 'slow')).size).toBeGreaterThan(0);
    // The worker finished or released its rows and log partitions before the database closed, itself: the main thread had none to release.
    expect((await outboxRows(store, 'slow')).filter((row) => row.lease_owner !== null)).toEqual([]);
    expect(await heldPartitions(store)).toEqual([]);
    expect(first.lines.filter((line) => line.includes('released the rows the fan-out worker held'))).toEqual([]);

    const second = await start();
    await waitFor(async () => (await unfinishedIds(store, 'slow')).size + (await unfinishedIds(store, 'nats')).size === 0, 'every event to be delivered', 25_000);
    expect(await streamCount()).toBe(stored.size);
    const inNats = await inStream();
    expect(accepted.every((id) => inNats.has(id))).toBe(true);
    const atHook = new Set(slow.requests.map((r) => r.headers['webhook-id'] as string));
    expect(accepted.every((id) => atHook.has(id))).toBe(true);

    second.child.kill('SIGTERM');
    expect(await second.exited).toBe(0);
  });

  it('a worker that crashes is restarted: deliveries are accepted meanwhile and nothing is lost', async () => {
    // A slow hook, so the worker holds leased rows when it exits.
    const slow = await server(() => ({ status: 200, delayMs: 100 }));
    const { start, inStream } = await workerRelay({ slow }, { BOXRELAY_OUTBOX_POLL_MS: '200', NODE_OPTIONS: '--inspect=127.0.0.1:0' });
    const relay = await start();
    const posted = await postAccepted(relay, 40);

    await exitFanoutWorker(inspectorUrlIn(relay.lines), 70);
    const crashed = await relay.waitForLog((e) => e.msg === 'the fan-out worker stopped; restarting it');
    expect(crashed.code).toBe(70);
    // The receiver does not wait for the fan-out.
    await postAccepted(relay, 20, posted);

    await waitFor(async () => Object.values(await pendingBySink(relay)).every((pending) => pending === 0), 'every row to be delivered after the restart');
    expect(new Set(slow.requests.map((r) => r.headers['webhook-id']))).toEqual(new Set(posted));
    const inNats = await inStream();
    expect(posted.every((id) => inNats.has(id))).toBe(true);
    await waitFor(async () => (await readyz(relay)).checks?.nats === 'ok', 'NATS ok in /readyz again');

    relay.child.kill('SIGTERM');
    expect(await relay.exited).toBe(0);
  });

  it('a worker that outgrows its heap ceiling (BOXRELAY_FANOUT_HEAP_MB) is restarted, not the process: nothing is lost', async () => {
    const slow = await server(() => ({ status: 200, delayMs: 100 }));
    const { start, inStream } = await workerRelay({ slow }, { BOXRELAY_OUTBOX_POLL_MS: '200', BOXRELAY_FANOUT_HEAP_MB: '128', NODE_OPTIONS: '--inspect=127.0.0.1:0' });
    const relay = await start();
    const posted = await postAccepted(relay, 40);

    // Live data that only grows, as a leak would: the worker's heap reaches its ceiling within seconds.
    await evaluateInFanoutWorker(
      inspectorUrlIn(relay.lines),
      "globalThis.hoard = []; setImmediate(function grow() { for (let i = 0; i < 20000; i++) globalThis.hoard.push({ i, text: 'x'.repeat(100) + i }); setImmediate(grow); })",
    );
    const failed = await relay.waitForLog((e) => e.msg === 'the fan-out worker failed');
    expect(JSON.stringify(failed.err)).toContain('ERR_WORKER_OUT_OF_MEMORY');
    await relay.waitForLog((e) => e.msg === 'the fan-out worker stopped; restarting it');
    await postAccepted(relay, 20, posted);

    await waitFor(async () => Object.values(await pendingBySink(relay)).every((pending) => pending === 0), 'every row to be delivered after the restart');
    expect(new Set(slow.requests.map((r) => r.headers['webhook-id']))).toEqual(new Set(posted));
    const inNats = await inStream();
    expect(posted.every((id) => inNats.has(id))).toBe(true);

    relay.child.kill('SIGTERM');
    expect(await relay.exited).toBe(0);
  });

  it('a worker that crashes on PostgreSQL: the rows it held are released at once, not when their leases end', async () => {
    // Slow enough that the worker holds leased hook rows when it exits; leases far longer than the test.
    const slow = await server(() => ({ status: 200, delayMs: 500 }));
    const { start } = await workerRelay(
      { slow },
      { BOXRELAY_DATABASE: await postgresSchema(), BOXRELAY_OUTBOX_LEASE_MS: '600000', NODE_OPTIONS: '--inspect=127.0.0.1:0' },
    );
    const relay = await start();
    const posted = await postAccepted(relay, 12);
    // At least once: what the crashed worker had in flight is sent again.
    await slow.receivedAtLeast(1);

    await exitFanoutWorker(inspectorUrlIn(relay.lines), 70);
    const released = await relay.waitForLog((e) => e.msg === 'released the rows the fan-out worker held');
    expect(released.rows).toBeGreaterThan(0);
    await waitFor(async () => (await pendingBySink(relay)).slow === 0, 'every hook row to be delivered after the restart');
    expect(new Set(slow.requests.map((r) => r.headers['webhook-id']))).toEqual(new Set(posted));

    relay.child.kill('SIGTERM');
    expect(await relay.exited).toBe(0);
  });

  it('a SIGTERM while the worker hangs: the worker is terminated after the shutdown budget, its rows released, the process exits', async () => {
    // Slow enough that the worker holds leased rows when it hangs.
    const slow = await server(() => ({ status: 200, delayMs: 2000 }));
    const { env, start } = await workerRelay({ slow }, { BOXRELAY_SHUTDOWN_TIMEOUT_MS: '1000', NODE_OPTIONS: '--inspect=127.0.0.1:0' });
    const relay = await start();
    const posted = await postAccepted(relay, 10);

    // Its event loop blocked: the worker never reads the stop message.
    await hangFanoutWorker(inspectorUrlIn(relay.lines));
    relay.child.kill('SIGTERM');
    // Without a bound this waits until the test's timeout.
    expect(await relay.exited).toBe(0);
    expect(relay.lines.some((line) => line.includes('the fan-out worker did not stop within the shutdown budget'))).toBe(true);

    const store = await openDatabase(env.BOXRELAY_DATABASE);
    const stored = new Set((await store.database.kysely.selectFrom('deliveries').select('id').execute()).map((d) => d.id));
    expect(posted.filter((id) => !stored.has(id))).toEqual([]);
    // Released by the main thread before the database closed.
    expect((await unfinishedIds(store, 'slow')).size).toBeGreaterThan(0);
    expect((await outboxRows(store, 'slow')).filter((row) => row.lease_owner !== null)).toEqual([]);
    expect(await heldPartitions(store)).toEqual([]);
  });
});
