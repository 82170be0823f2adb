import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { beforeAll, expect, it } from 'vitest';
import { openStore } from '../src/store/store.js';
import { requireBuild } from './support/process.js';
import { fanoutFixture, unfinishedIds } from './support/fanout-relay.js';
import { waitFor } from './support/fanout.js';
import { SHARED_NATS, natsClient, uniqueNames } from './support/nats.js';
import { SECRET, delivery } from './support/sign.js';

beforeAll(requireBuild);

const { defer, server, serve } = fanoutFixture();


it('delivers all 100 to NATS and the hook after a SIGKILL right after the last 200', async () => {
  const { prefix, stream } = uniqueNames();
  const client = await natsClient();
  client.streams.push(stream);
  defer(() => client.close());
  // A slow hook, so work is still in flight or waiting when the process is killed.
  const target = await server(() => ({ status: 200, delayMs: 10 }));

  const dir = mkdtempSync(join(tmpdir(), 'boxrelay-crash-'));
  writeFileSync(join(dir, 'hooks.yaml'), `- name: crash\n  url: ${target.url}\n  concurrency: 2\n`);
  const env = {
    BOXRELAY_SECRETS: SECRET,
    BOXRELAY_DATABASE: join(dir, 'relay.db'),
    BOXRELAY_NATS_URL: SHARED_NATS,
    BOXRELAY_NATS_SUBJECT_PREFIX: prefix,
    BOXRELAY_NATS_STREAM: stream,
    BOXRELAY_HOOKS_FILE: join(dir, 'hooks.yaml'),
    BOXRELAY_OUTBOX_POLL_MS: '200',
  };
  const first = await serve(env);
  const natsReady = async () => {
    const res = await fetch(`http://127.0.0.1:${first.internalPort}/readyz`).catch(() => undefined);
    return res?.status === 200 && ((await res.json()) as { checks: { nats: string } }).checks.nats === 'ok';
  };
  await waitFor(natsReady, `the relay to be ready (${first.lines.join('\n')})`);
  const posted: string[] = [];
  for (let batch = 0; batch < 10; batch++) {
    const statuses = await Promise.all(
      Array.from({ length: 10 }, async (_, i) => {
        const d = delivery({ timestamp: Math.floor(Date.now() / 1000), boxId: `bx_${batch}_${i}` });
        posted.push(d.id);
        const res = await fetch(`http://127.0.0.1:${first.port}/webhooks`, { method: 'POST', headers: d.headers, body: d.body });
        return res.status;
      }),
    );
    expect(statuses).toEqual(Array(10).fill(200));
  }
  first.child.kill('SIGKILL');
  await first.exited;

  const store = await openStore({ url: env.BOXRELAY_DATABASE });
  defer(() => store.close());
  const unfinished = await unfinishedIds(store, 'crash');
  expect(unfinished.size).toBeGreaterThan(0);
  const stored = await store.database.kysely.selectFrom('deliveries').select('id').execute();
  expect(new Set(stored.map((d) => d.id))).toEqual(new Set(posted));

  const second = await serve(env);
  await waitFor(async () => {
    return (await unfinishedIds(store, 'nats')).size + (await unfinishedIds(store, 'crash')).size === 0;
  }, `every event to be delivered (${second.lines.join('\n')})`, 25_000);

  // NATS: exactly once in the stream (a re-publish after the kill is dropped by Nats-Msg-Id).
  expect((await client.jsm.streams.info(stream)).state.messages).toBe(100);
  const inStream = new Set<string>();
  for (let seq = 1; seq <= 100; seq++) inStream.add((await client.jsm.streams.getMessage(stream, { seq }))!.header.get('Nats-Msg-Id'));
  expect(inStream).toEqual(new Set(posted));

  // The hook: each at least once; a second copy only of what was not recorded delivered at the kill.
  const received = target.requests.map((r) => r.headers['webhook-id'] as string);
  expect(new Set(received)).toEqual(new Set(posted));
  const twice = received.filter((id, i) => received.indexOf(id) !== i);
  expect(twice.every((id) => unfinished.has(id))).toBe(true);
  // At most the requests in flight (concurrency 2) and acks not yet flushed to the database.
  expect(twice.length).toBeLessThanOrEqual(4);

  second.child.kill('SIGTERM');
  expect(await second.exited).toBe(0);
});
