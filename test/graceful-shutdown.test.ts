import { once } from 'node:events';
import { Agent, request as httpRequest, type ClientRequest, type IncomingMessage } from 'node:http';
import BetterSqlite3 from 'better-sqlite3';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { allDelivered, fanoutFixture, hook, metricValue, storedWork } from './support/fanout-relay.js';
import { sqliteFile } from './support/databases.js';
import { killIfRunning, requireBuild, spawnRelay, type RelayProcess } from './support/process.js';
import { SECRET, delivery, type Delivery } from './support/sign.js';
import { connect } from 'node:net';
import express from 'express';
import { listen } from '../src/http/listen.js';

beforeAll(requireBuild);

let relay: RelayProcess | undefined;
afterEach(async () => {
  await killIfRunning(relay);
  relay = undefined;
});

interface Sent {
  delivery: Delivery;
  req: ClientRequest;
  answer: Promise<Answer>;
}

interface Answer {
  status: number;
  body: string;
  connection: string | undefined;
}

/** One delivery on `agent` (false: a connection of its own); its answer or the connection error it gets instead. */
function send(port: number, agent: Agent | false, extraHeaders: Record<string, string> = {}): Sent {
  const d = delivery({ timestamp: Math.floor(Date.now() / 1000) });
  const req = httpRequest({
    host: '127.0.0.1',
    port,
    method: 'POST',
    path: '/webhooks',
    agent,
    headers: { ...d.headers, 'Content-Length': d.body.length, ...extraHeaders },
  });
  const answer = new Promise<Answer>((resolve, reject) => {
    req.once('error', reject);
    req.once('response', (res: IncomingMessage) => {
      let body = '';
      res.on('data', (chunk: Buffer) => (body += chunk.toString()));
      res.once('end', () => resolve({ status: res.statusCode!, body, connection: res.headers.connection }));
    });
  });
  answer.catch(() => {});
  return { delivery: d, req, answer };
}

/** What became of a request: its status, `refused` (the connection never reached the relay), or the error that ended a connection that had. */
const outcome = (s: Sent): Promise<number | string> =>
  s.answer.then(
    (a) => a.status,
    (error: NodeJS.ErrnoException) => (error.code === 'ECONNREFUSED' ? 'refused' : `${error.code ?? error.message}`),
  );

/**
 * Steady load: `senders` loops, each on a keep-alive agent, sending one delivery after another until
 * stopped. Counts by events (each request sent, each answer), so a test waits for load, not for time.
 */
function load(port: number, senders: number) {
  const agents = Array.from({ length: senders }, () => new Agent({ keepAlive: true, maxSockets: 1 }));
  const sent: Sent[] = [];
  let answered = 0;
  let running = true;
  const waiters: { n: number; resolve: () => void }[] = [];
  const loops = agents.map(async (agent) => {
    while (running) {
      const s = send(port, agent);
      sent.push(s);
      s.req.end(s.delivery.body);
      if ((await outcome(s)) !== 200) return;
      answered++;
      for (const w of waiters.filter((w) => answered >= w.n)) waiters.splice(waiters.indexOf(w), 1) && w.resolve();
    }
  });
  return {
    sent,
    answered: () => answered,
    /** Resolves once `n` requests in all have been answered 200. */
    answeredAtLeast: (n: number) => (answered >= n ? Promise.resolve() : new Promise<void>((resolve) => waiters.push({ n, resolve }))),
    /** Ends each loop after its request in flight. */
    async stop() {
      running = false;
      await Promise.all(loops);
      for (const agent of agents) agent.destroy();
    },
  };
}

async function readyz(port: number): Promise<{ status: number; body: unknown }> {
  const res = await fetch(`http://127.0.0.1:${port}/readyz`);
  return { status: res.status, body: await res.json() };
}

/** Counts the rows stored for these deliveries. */
function storedCount(database: string, sent: Sent[]): number {
  const db = new BetterSqlite3(database, { readonly: true });
  try {
    const count = db.prepare(`SELECT count(*) AS n FROM deliveries WHERE id IN (SELECT value FROM json_each(?))`);
    return (count.get(JSON.stringify(sent.map((s) => s.delivery.id))) as { n: number }).n;
  } finally {
    db.close();
  }
}

describe('graceful shutdown (contract section 6)', () => {
  it('on SIGTERM under load: /readyz answers 503 on both ports while the relay serves through the delay; 50 connections opened with the signal are all answered; then it answers what it accepted and exits 0', async () => {
    const database = sqliteFile();
    // A long delay, ended by a second signal: the test decides when the delay is over, not a clock.
    relay = await spawnRelay({ BOXRELAY_SECRETS: SECRET, BOXRELAY_DATABASE: database, BOXRELAY_SHUTDOWN_DELAY: '1h', BOXRELAY_SHUTDOWN_TIMEOUT_MS: '10000' });
    const { port, internalPort } = relay;
    const traffic = load(port, 20);
    await traffic.answeredAtLeast(100);

    relay.child.kill('SIGTERM');
    const withSignal = Array.from({ length: 50 }, () => send(port, false));
    for (const s of withSignal) s.req.end(s.delivery.body);
    await relay.waitForLog((e) => e.msg === 'shutting down');

    expect(await readyz(port)).toEqual({ status: 503, body: { ok: false } });
    expect(await readyz(internalPort)).toEqual({ status: 503, body: { ok: false, checks: { storage: 'ok' }, shuttingDown: true } });
    expect(await Promise.all(withSignal.map(outcome))).toEqual(Array(50).fill(200));
    // The delay serves new connections and the load alike; each answer closes its connection, so
    // clients move on to replicas that are not stopping.
    const during = send(port, false);
    during.req.end(during.delivery.body);
    expect(await during.answer).toMatchObject({ status: 200, connection: 'close' });
    const answeredAtSignal = traffic.answered();
    await traffic.answeredAtLeast(answeredAtSignal + 100);

    // Requests still arriving when the delay ends: ten with half a body ("100 Continue" proves the
    // relay is handling them).
    const slow = Array.from({ length: 10 }, () => send(port, false, { Expect: '100-continue' }));
    for (const s of slow) s.req.flushHeaders();
    await Promise.all(slow.map((s) => once(s.req, 'continue')));
    for (const s of slow) s.req.write(s.delivery.body.subarray(0, 10));
    // A load balancer has stopped sending by now.
    await traffic.stop();

    relay.child.kill('SIGTERM');
    await relay.waitForLog((e) => e.msg === 'shutdown delay over; no longer listening once what was accepted is answered');
    for (const s of slow) s.req.end(s.delivery.body.subarray(10));
    const slowAnswers = await Promise.all(slow.map((s) => s.answer));
    expect(slowAnswers.map((a) => [a.status, a.connection])).toEqual(Array(10).fill([200, 'close']));
    expect(await relay.exited).toBe(0);
    const late = send(port, false);
    late.req.end(late.delivery.body);
    expect(await outcome(late)).toBe('refused');

    // Every request of the load was answered 200: none reset, none left without an answer.
    const all = [...traffic.sent, ...withSignal, during, ...slow];
    expect((await Promise.all(traffic.sent.map(outcome))).filter((o) => o !== 200)).toEqual([]);
    expect(traffic.sent.length).toBe(traffic.answered());
    expect(storedCount(database, all)).toBe(all.length);
    const stopped = relay.lines.findIndex((l) => l.includes('"boxrelay stopped"'));
    expect(stopped).toBeGreaterThan(relay.lines.findIndex((l) => l.includes('"shutting down"')));
  });

  it('a SIGTERM the moment it says it is listening is a graceful stop (exit 0), never the default exit that resets connections', async () => {
    // The race is narrow, so a few relays are stopped at once.
    const relays = await Promise.all(Array.from({ length: 4 }, () => spawnRelay({ BOXRELAY_SECRETS: SECRET, BOXRELAY_DATABASE: sqliteFile() })));
    for (const r of relays) r.child.kill('SIGTERM');
    expect(await Promise.all(relays.map((r) => r.exited))).toEqual(Array(4).fill(0));
    for (const r of relays) expect(await r.waitForLog((e) => e.msg === 'shutting down')).toMatchObject({ signal: 'SIGTERM' });
  });

  it('with BOXRELAY_SHUTDOWN_DELAY=0 it stops at once: of 50 connections opened with the signal each is answered or refused, none reset, and it exits 0', async () => {
    const database = sqliteFile();
    relay = await spawnRelay({ BOXRELAY_SECRETS: SECRET, BOXRELAY_DATABASE: database, BOXRELAY_SHUTDOWN_DELAY: '0' });
    const { port } = relay;
    // An idle keep-alive connection from before the signal is closed by the relay, without a second signal.
    const idle = new Agent({ keepAlive: true, maxSockets: 1 });
    const first = send(port, idle);
    first.req.end(first.delivery.body);
    expect((await first.answer).status).toBe(200);

    relay.child.kill('SIGTERM');
    const withSignal = Array.from({ length: 50 }, () => send(port, false));
    for (const s of withSignal) s.req.end(s.delivery.body);
    expect(await relay.exited).toBe(0);
    const outcomes = await Promise.all(withSignal.map(outcome));
    expect(outcomes.filter((o) => o !== 200 && o !== 'refused')).toEqual([]);
    expect(await relay.waitForLog((e) => e.msg === 'shutting down')).toMatchObject({ signal: 'SIGTERM', delayMs: 0 });
    expect(relay.lines.some((l) => l.includes('second signal'))).toBe(false);
    const answered = withSignal.filter((_, i) => outcomes[i] === 200);
    expect(storedCount(database, [first, ...answered])).toBe(answered.length + 1);
    idle.destroy();
  });
});

describe('a fan-out attempt cut by shutdown', () => {
  const f = fanoutFixture();

  it('is released, not counted: no attempt used, no failure reported, and sent again after a restart', async () => {
    const held = await f.server(() => 'hang');
    const database = sqliteFile();
    const first = await f.relay({ database, hooks: [hook('held', held.url)], shutdownTimeoutMs: 1000 });
    expect((await first.post()).status).toBe(200);
    await held.received(1);
    await first.relay.stop();

    // Left in the log after the stored cursor, as if never tried: no outbox row (no attempt counted), no partition held.
    const { unfinished, rows, held: partitions } = await storedWork(first, 'held');
    expect([unfinished.size, rows, partitions]).toEqual([1, [], []]);
    expect(await metricValue(first.registry, 'boxrelay_sink_deliveries_total', { sink: 'held', outcome: 'retried' })).toBe(0);
    expect(first.logs.entries().filter((e) => /delivery failed/.test(String(e.msg)))).toEqual([]);

    const answering = await f.server(() => 200);
    const second = await f.relay({ database, hooks: [hook('held', answering.url)] });
    await answering.received(1);
    await allDelivered(second, 'held');
    expect(await metricValue(second.registry, 'boxrelay_sink_deliveries_total', { sink: 'held', outcome: 'delivered' })).toBe(1);
    expect(await metricValue(second.registry, 'boxrelay_sink_deliveries_total', { sink: 'held', outcome: 'retried' })).toBe(0);
  });
});

describe('closing a listener', () => {
  it('answers a request pipelined behind one in flight when the close starts, with Connection: close, then closes the connection', async () => {
    let releaseSlow!: () => void;
    let slowStarted!: () => void;
    const started = new Promise<void>((resolve) => (slowStarted = resolve));
    const app = express();
    // Its headers go out before shutdown starts, so its connection stays open for the next request.
    app.get('/slow', async (_req, res) => {
      res.write('sl');
      slowStarted();
      await new Promise<void>((resolve) => (releaseSlow = resolve));
      res.end('ow');
    });
    app.get('/fast', (_req, res) => void res.send('fast'));
    const listening = await listen(app, 0, '127.0.0.1');
    const socket = connect(listening.port, '127.0.0.1');
    await once(socket, 'connect');
    let received = '';
    socket.on('data', (chunk: Buffer) => (received += chunk.toString()));
    socket.write('GET /slow HTTP/1.1\r\nHost: x\r\n\r\n');
    await started;
    const closed = listening.close(5000);
    socket.write('GET /fast HTTP/1.1\r\nHost: x\r\n\r\n');
    const socketClosed = once(socket, 'close');
    releaseSlow();
    await closed;
    await socketClosed;
    expect(received).toContain('sl');
    expect(received).toContain('fast');
    expect(received.toLowerCase()).toContain('connection: close');
    socket.destroy();
  });
});
