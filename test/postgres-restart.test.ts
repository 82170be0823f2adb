import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { waitFor } from './support/fanout.js';
import { ownPostgres, type OwnPostgres } from './support/postgres-server.js';
import { killIfRunning, logLines, requireBuild, spawnRelay, type RelayProcess } from './support/process.js';
import { SECRET, delivery } from './support/sign.js';

// Short database waits, so each case takes seconds.
const DATABASE_TIMEOUT_MS = 500;

let pg: OwnPostgres;
let relay: RelayProcess | undefined;

beforeAll(async () => {
  requireBuild();
  pg = await ownPostgres();
});
afterAll(() => pg?.close());
afterEach(async () => {
  await killIfRunning(relay);
  relay = undefined;
  await pg.restore();
});

interface Answer {
  id: string;
  status: number;
  code?: string;
  /** Which of the concurrent senders got it. */
  lane?: number;
}

async function post(port: number): Promise<Answer> {
  const d = delivery({ timestamp: Math.floor(Date.now() / 1000) });
  const response = await fetch(`http://127.0.0.1:${port}/webhooks`, { method: 'POST', headers: d.headers, body: d.body });
  const body = (await response.json()) as { code?: string };
  return { id: d.id, status: response.status, code: body.code };
}

/** Posts from `lanes` concurrent senders until stopped; every answer is kept. */
function traffic(port: number, lanes = 4) {
  const answers: Answer[] = [];
  let running = true;
  const done = Promise.all(
    Array.from({ length: lanes }, async (_, lane) => {
      while (running) answers.push({ ...(await post(port)), lane });
    }),
  );
  // A sender that gets no HTTP answer (the relay died, a reset) fails the wait at once.
  const failed = done.then(() => new Promise<never>(() => {}));
  failed.catch(() => {});
  return {
    answers,
    /** Resolves once an answer after the `from`-th one matches. */
    until: (match: (a: Answer) => boolean, what: string, from = answers.length) =>
      Promise.race([waitFor(() => answers.slice(from).find(match), what, 15_000), failed]),
    /**
     * Resolves once every sender has had `count` answers after the `from`-th one: while the database
     * is out, that proves no request waits for it to come back (a request that did would hold its
     * sender, and the wait would fail).
     */
    eachSenderAnswered: (count: number, what: string, from = answers.length) =>
      Promise.race([
        waitFor(() => {
          const later = answers.slice(from);
          return Array.from({ length: lanes }, (_, lane) => later.filter((a) => a.lane === lane).length >= count).every(Boolean) || undefined;
        }, what, 15_000),
        failed,
      ]),
    async stop() {
      running = false;
      await done;
      return answers;
    },
  };
}

async function readyz(relay: RelayProcess): Promise<{ status: number; body: { ok: boolean; checks: Record<string, string>; errors?: Record<string, string> } }> {
  const response = await fetch(`http://127.0.0.1:${relay.internalPort}/readyz`);
  return { status: response.status, body: (await response.json()) as never };
}

async function storedIds(ids: string[]): Promise<Set<string>> {
  const rows = await pg.query<{ id: string }>('SELECT id FROM deliveries WHERE id = ANY($1)', [ids]);
  return new Set(rows.map((r) => r.id));
}

function startRelay(env: Record<string, string> = {}): Promise<RelayProcess> {
  return spawnRelay({
    BOXRELAY_SECRETS: SECRET,
    BOXRELAY_DATABASE: pg.url,
    BOXRELAY_DATABASE_TIMEOUT_MS: String(DATABASE_TIMEOUT_MS),
    ...env,
  });
}

function expectAlive(relay: RelayProcess): void {
  expect(relay.child.exitCode, relay.lines.join('\n')).toBeNull();
}

describe('PostgreSQL failures under a running relay', () => {
  it('survives a restart: 503 storage_unavailable and /readyz saying why while down, 200 again soon after, nothing acknowledged lost', async () => {
    relay = await startRelay();
    const load = traffic(relay.port);
    await load.until((a) => a.status === 200, 'a first stored delivery');

    await pg.stop();
    const down = load.answers.length;
    const refused = await load.until((a) => a.status === 503, 'a refusal while the database is down');
    expect(refused.code).toBe('storage_unavailable');
    await load.eachSenderAnswered(5, 'five answers to each sender while the database is down', down);
    const ready = await readyz(relay);
    expect(ready.status).toBe(503);
    expect(ready.body.checks.storage).toBe('down');
    expect(ready.body.errors?.storage).toMatch(/\S/);
    // The cause reaches the log once, not once per request.
    const logged = await relay.waitForLog((e) => e.msg === 'storage failure');
    expect(logged.reason).toMatch(/\S/);
    expectAlive(relay);

    await pg.start();
    await load.until((a) => a.status === 200, 'a delivery stored after the restart');
    const answers = await load.stop();
    expectAlive(relay);
    // Readiness reuses its last storage answer for a second.
    await waitFor(async () => (await readyz(relay!)).status === 200, '/readyz to answer 200 again', 5000);

    expect(answers.every((a) => a.status === 200 || (a.status === 503 && a.code === 'storage_unavailable'))).toBe(true);
    const acknowledged = answers.filter((a) => a.status === 200).map((a) => a.id);
    expect((await storedIds(acknowledged)).size).toBe(acknowledged.length);
    // Within the 30 s interval each distinct cause is logged once, however many requests it failed.
    const reasons = logLines(relay).map((l) => JSON.parse(l) as Record<string, unknown>).filter((e) => e.msg === 'storage failure').map((e) => e.reason);
    expect(reasons.length).toBeLessThan(answers.filter((a) => a.status === 503).length);
    expect(new Set(reasons).size).toBe(reasons.length);
  });

  it('keeps answering when its backends are terminated by pg_terminate_backend', async () => {
    relay = await startRelay();
    const load = traffic(relay.port);
    await load.until((a) => a.status === 200, 'a first stored delivery');
    for (let round = 0; round < 3; round++) {
      // The relay may hold no connection at this instant (between a termination and its reconnect).
      await waitFor(async () => (await pg.terminateBackends()) > 0 || undefined, 'a backend of the relay to terminate');
      await load.until((a) => a.status === 200, 'a delivery stored after the backends were terminated');
    }
    const answers = await load.stop();
    expectAlive(relay);
    expect(answers.every((a) => a.status === 200 || a.code === 'storage_unavailable')).toBe(true);
    const acknowledged = answers.filter((a) => a.status === 200).map((a) => a.id);
    expect((await storedIds(acknowledged)).size).toBe(acknowledged.length);
  });

  it('answers 503 within seconds when the database stops answering, and recovers when it answers again', async () => {
    relay = await startRelay();
    const load = traffic(relay.port);
    await load.until((a) => a.status === 200, 'a first stored delivery');
    await pg.pause();
    try {
      const from = load.answers.length;
      await load.until((a) => a.status === 503, 'a refusal while the database is frozen');
      // Several rounds of every sender: none waits for the frozen database to answer.
      await load.eachSenderAnswered(3, 'three answers to each sender while the database is frozen', from);
      // Readiness reuses a storage answer for a second: one from just before the freeze may still be served.
      const ready = await waitFor(async () => {
        const answer = await readyz(relay!);
        return answer.status === 503 ? answer : undefined;
      }, '/readyz to answer 503 while the database is frozen', 5000);
      expect(ready.body.errors?.storage).toMatch(/\S/);
    } finally {
      await pg.resume();
    }
    await load.until((a) => a.status === 200, 'a delivery stored after the database answers again');
    const answers = await load.stop();
    expectAlive(relay);
    expect(answers.every((a) => a.status === 200 || a.code === 'storage_unavailable')).toBe(true);
    const acknowledged = answers.filter((a) => a.status === 200).map((a) => a.id);
    expect((await storedIds(acknowledged)).size).toBe(acknowledged.length);
  });

  it('queues deliveries beyond the pool and its waiting limit while the database is frozen, and stores each once it answers again', async () => {
    // Long waits, the smallest pool: deliveries do not wait for the pool (contract section 19: a burst is not a storage failure).
    relay = await startRelay({ BOXRELAY_DATABASE_TIMEOUT_MS: '20000', BOXRELAY_DATABASE_POOL_SIZE: '1', BOXRELAY_DATABASE_MAX_WAITING: '1' });
    expect((await post(relay.port)).status).toBe(200);
    await pg.pause();
    const answers: Answer[] = [];
    let pending: Promise<Answer>[];
    try {
      pending = Array.from({ length: 6 }, () => post(relay!.port).then((a) => (answers.push(a), a)));
      // An answer from the same relay after they were sent: a refusal at once would have come by now.
      expect((await fetch(`http://127.0.0.1:${relay.port}/healthz`)).status).toBe(200);
      expect(answers).toEqual([]);
    } finally {
      await pg.resume();
    }
    const all = await Promise.all(pending);
    expect(all.map((a) => a.status)).toEqual(Array(6).fill(200));
    expect((await storedIds(all.map((a) => a.id))).size).toBe(6);
  });
});
