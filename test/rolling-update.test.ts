import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { beforeAll, describe, expect, it } from 'vitest';
import { openDatabase } from '../src/store/engines/database.js';
import { createFanoutStore } from '../src/store/fanout-store.js';
import { postgresSchema } from './support/databases.js';
import { backlogsByDefinition, waitFor } from './support/fanout.js';
import { fanoutFixture } from './support/fanout-relay.js';
import type { HookServer } from './support/hook-server.js';
import { requireBuild, type RelayProcess } from './support/process.js';
import { SECRET, delivery } from './support/sign.js';

beforeAll(requireBuild);
const { defer, server, serve } = fanoutFixture();

const EVENTS = 500;
const IN_FLIGHT = 10;

/** Each event id a hook received, with how many times. */
const countsById = (hook: HookServer) => {
  const counts = new Map<string, number>();
  for (const request of hook.requests) {
    const id = request.headers['webhook-id'] as string;
    counts.set(id, (counts.get(id) ?? 0) + 1);
  }
  return counts;
};

describe('a rolling update on PostgreSQL that removes one hook and adds another', () => {
  it('loses nothing and invents nothing: no dead letter, each hook each of its events once', { timeout: 120_000 }, async () => {
    // `removed` takes its time, so it has a backlog (pending and leased rows) when the new replica starts.
    const common = await server();
    const removed = await server(() => ({ status: 200, delayMs: 60 }));
    const added = await server();
    const dir = mkdtempSync(join(tmpdir(), 'boxrelay-rolling-'));
    // Timeouts far above any answer time, so a loaded machine never makes a retry (a second copy).
    const hooksFile = (name: string, hooks: [string, HookServer, number][]) => {
      const file = join(dir, `${name}.yaml`);
      writeFileSync(file, hooks.map(([hook, s, concurrency]) => `- name: ${hook}\n  url: ${s.url}\n  timeoutMs: 20000\n  concurrency: ${concurrency}\n`).join(''));
      return file;
    };
    const oldConfig = hooksFile('old', [['common', common, 4], ['removed', removed, 1]]);
    const newConfig = hooksFile('new', [['common', common, 4], ['added', added, 4]]);
    const database = await postgresSchema();
    const env = (hooks: string) => ({
      BOXRELAY_SECRETS: SECRET,
      BOXRELAY_DATABASE: database,
      BOXRELAY_HOOKS_FILE: hooks,
      BOXRELAY_OUTBOX_POLL_MS: '200',
      // Short, so each replica looks at the others' work (and announces its sinks) every 2 s during the run.
      BOXRELAY_UNSERVED_SINK_GRACE: '8s',
    });

    interface Replica {
      relay: RelayProcess;
      hooks: string[];
      /** Taken out of the load balancer: sent nothing more. */
      retired: boolean;
      posting: number;
    }
    const replicas: Replica[] = [];
    const [a, b] = await Promise.all([serve(env(oldConfig)), serve(env(oldConfig))]);
    replicas.push({ relay: a, hooks: ['common', 'removed'], retired: false, posting: 0 }, { relay: b, hooks: ['common', 'removed'], retired: false, posting: 0 });

    /** Each accepted event with the hooks its replica routed it to. */
    const routed = new Map<string, string[]>();
    const seconds = Math.floor(Date.now() / 1000);
    let next = 0;
    let swapped: Promise<void> | undefined;
    let replacementUp!: () => void;
    const replacementStarted = new Promise<void>((resolve) => (replacementUp = resolve));
    const post = async () => {
      const i = next++;
      // The second half of the stream goes out once the new replica serves too.
      if (i > EVENTS / 2) await replacementStarted;
      const live = replicas.filter((r) => !r.retired);
      const target = live[i % live.length]!;
      const d = delivery({ timestamp: seconds, boxId: `bx_${i % 40}` });
      target.posting++;
      try {
        const response = await fetch(`http://127.0.0.1:${target.relay.port}/webhooks`, { method: 'POST', headers: d.headers, body: d.body, signal: AbortSignal.timeout(20_000) });
        expect(response.status, await response.text()).toBe(200);
      } finally {
        target.posting--;
      }
      routed.set(d.id, target.hooks);
      // Midway: a replica with the new hook list starts, then the old one it replaces is taken out of
      // service and stopped (SIGTERM), as a Kubernetes rolling update does.
      if (i === EVENTS / 2) {
        swapped = (async () => {
          const replacement = await serve(env(newConfig));
          replicas.push({ relay: replacement, hooks: ['common', 'added'], retired: false, posting: 0 });
          replacementUp();
          // Both hook lists serve side by side for a while, then the old replica goes.
          await waitFor(() => next >= EVENTS * 0.7, 'more of the stream to go out');
          const old = replicas[0]!;
          old.retired = true;
          await waitFor(() => old.posting === 0, 'the posts to the old replica to be answered');
          old.relay.child.kill('SIGTERM');
          expect(await old.relay.exited).toBe(0);
        })();
      }
    };
    await Promise.all(
      Array.from({ length: IN_FLIGHT }, async () => {
        while (next < EVENTS) await post();
      }),
    );
    await swapped;

    const db = new pg.Client(database);
    await db.connect();
    defer(() => db.end());
    const count = async (where: string) => (await db.query(`SELECT count(*)::int AS n FROM outbox WHERE ${where}`)).rows[0].n as number;
    const store = openDatabase({ url: database });
    defer(() => store.close());
    const outbox = createFanoutStore(store);
    // Pending as the relay counts it: outbox rows and the log past each hook's cursors.
    let pending: Record<string, number> = {};
    await waitFor(
      async () => {
        pending = await outbox.exceptions.countBySink('pending');
        return Object.values(pending).every((n) => n === 0);
      },
      'every event delivered',
      60_000,
    ).catch(async (error: Error) => {
      // Says which sink waits, and whether the kept count agrees with the tables.
      throw new Error(`${error.message}: pending as counted ${JSON.stringify(pending)}; the log's backlogs by definition ${JSON.stringify(await backlogsByDefinition(store))}`);
    });
    expect(await count(`status <> 'delivered'`)).toBe(0);

    const expected = (hook: string) => [...routed].filter(([, hooks]) => hooks.includes(hook)).map(([id]) => id).sort();
    for (const [name, hook] of [['common', common], ['removed', removed], ['added', added]] as const) {
      const counts = countsById(hook);
      expect([...counts.keys()].sort(), `${name} received each of its events`).toEqual(expected(name));
      expect([...counts].filter(([, n]) => n > 1), `${name} received none twice`).toEqual([]);
      // Exact from here on: one more request before the relays stop fails the test.
      await hook.received(expected(name).length);
    }
    expect(expected('common')).toHaveLength(EVENTS);
    // Both hook lists took part: the removed hook's backlog was sent by the old replica still running.
    expect(expected('removed').length).toBeGreaterThan(EVENTS / 2);
    expect(expected('added').length).toBeGreaterThan(0);
  });
});
