import { once } from 'node:events';
import { Agent, request as httpRequest, type ClientRequest, type IncomingMessage } from 'node:http';
import BetterSqlite3 from 'better-sqlite3';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { allDelivered, fanoutFixture, hook, metricValue, storedRows } from './support/fanout-relay.js';
import { sqliteFile } from './support/databases.js';
import { killIfRunning, requireBuild, spawnRelay, type RelayProcess } from './support/process.js';
import { SECRET, delivery, type Delivery } from './support/sign.js';

beforeAll(requireBuild);

let relay: RelayProcess | undefined;
afterEach(async () => {
  await killIfRunning(relay);
  relay = undefined;
});

interface Sent {
  delivery: Delivery;
  req: ClientRequest;
  answer: Promise<{ status: number; body: string }>;
}

/** One delivery on a keep-alive agent; its answer or the connection error it gets instead. */
function send(port: number, agent: Agent, extraHeaders: Record<string, string> = {}): Sent {
  const d = delivery({ timestamp: Math.floor(Date.now() / 1000) });
  const req = httpRequest({
    host: '127.0.0.1',
    port,
    method: 'POST',
    path: '/webhooks',
    agent,
    headers: { ...d.headers, 'Content-Length': d.body.length, ...extraHeaders },
  });
  const answer = new Promise<{ status: number; body: string }>((resolve, reject) => {
    req.once('error', reject);
    req.once('response', (res: IncomingMessage) => {
      let body = '';
      res.on('data', (chunk: Buffer) => (body += chunk.toString()));
      res.once('end', () => resolve({ status: res.statusCode!, body }));
    });
  });
  answer.catch(() => {});
  return { delivery: d, req, answer };
}

describe('graceful shutdown', () => {
  it('answers every request sent on an open connection when SIGTERM arrives under load, stores every 200 and exits 0', async () => {
    const database = sqliteFile();
    relay = await spawnRelay({ BOXRELAY_SECRETS: SECRET, BOXRELAY_DATABASE: database, BOXRELAY_SHUTDOWN_TIMEOUT_MS: '10000' });
    const port = relay.port;
    const agents = Array.from({ length: 10 }, () => new Agent({ keepAlive: true, maxSockets: 5 }));
    const sent: Sent[] = [];
    // Ten requests in flight with half a body ("100 Continue" proves the server is handling them).
    const slow = agents.map((agent) => send(port, agent, { Expect: '100-continue' }));
    for (const s of slow) s.req.flushHeaders();
    await Promise.all(slow.map((s) => once(s.req, 'continue')));
    for (const s of slow) s.req.write(s.delivery.body.subarray(0, 10));
    // Forty senders on keep-alive connections, until the relay says it is shutting down.
    let shuttingDown = false;
    const senders = agents.flatMap((agent) =>
      Array.from({ length: 4 }, async () => {
        while (!shuttingDown) {
          const s = send(port, agent);
          sent.push(s);
          s.req.end(s.delivery.body);
          await s.answer.catch(() => {});
        }
      }),
    );
    await new Promise((resolve) => setTimeout(resolve, 300));
    relay.child.kill('SIGTERM');
    await relay.waitForLog((e) => e.msg === 'shutting down');
    shuttingDown = true;
    for (const s of slow) s.req.end(s.delivery.body.subarray(10));
    await Promise.all(senders);

    const outcomes = await Promise.all(
      [...slow, ...sent].map((s) =>
        s.answer.then(
          (a) => a.status,
          // A new connection may be refused or reset as the server stops listening (the kernel
          // resets those it queued but the server never accepted); a request sent on an open
          // connection is answered, never reset.
          (error: NodeJS.ErrnoException) => (s.req.reusedSocket ? `${error.code} on an open connection` : 'new connection refused'),
        ),
      ),
    );
    expect(outcomes.filter((o) => o !== 200 && o !== 'new connection refused')).toEqual([]);
    expect(outcomes.slice(0, slow.length)).toEqual(Array(slow.length).fill(200));
    expect(await relay.exited).toBe(0);
    const stopped = relay.lines.findIndex((l) => l.includes('"boxrelay stopped"'));
    expect(stopped).toBeGreaterThan(relay.lines.findIndex((l) => l.includes('"shutting down"')));

    const db = new BetterSqlite3(database, { readonly: true });
    try {
      const acknowledged = [...slow, ...sent].filter((_, i) => outcomes[i] === 200).map((s) => s.delivery.id);
      const count = db.prepare(`SELECT count(*) AS n FROM deliveries WHERE id IN (SELECT value FROM json_each(?))`);
      expect((count.get(JSON.stringify(acknowledged)) as { n: number }).n).toBe(acknowledged.length);
    } finally {
      db.close();
      for (const agent of agents) agent.destroy();
    }
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

    const [row] = await storedRows(first, 'held');
    expect(row).toMatchObject({ status: 'pending', attempts: 0, last_error: null, lease_owner: null });
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
