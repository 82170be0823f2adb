import request from 'supertest';
import { expect, it } from 'vitest';
import { fanoutFixture, metricValue, outboxRows } from './support/fanout-relay.js';
import { waitFor } from './support/fanout.js';
import { natsClient, ownNats, uniqueNames } from './support/nats.js';
import type { TestRelay } from './support/relay.js';

const { defer, relay } = fanoutFixture();

it('accepts deliveries while NATS is down and publishes each once when it is back', async () => {
  const nats = await ownNats();
  defer(() => nats.kill());
  const { prefix, stream } = uniqueNames();
  const t = await relay({ natsUrl: nats.url, natsSubjectPrefix: prefix, natsStream: stream }, { nats: { backoff: { minMs: 50, maxMs: 300 } } });
  const natsCheck = async () => (await request(t.relay.internalApp).get('/readyz')).body.checks.nats as string;
  await waitFor(async () => (await natsCheck()) === 'ok', 'NATS to be up');

  await nats.kill();
  await waitFor(async () => (await natsCheck()) === 'down', 'NATS to be seen down');
  for (let i = 0; i < 50; i++) expect((await t.post({ boxId: `bx_${i}` })).status).toBe(200);
  const ready = await request(t.relay.internalApp).get('/readyz');
  expect(ready.status).toBe(200);
  expect(ready.body.checks).toEqual({ storage: 'ok', nats: 'down' });
  expect(await metricValue(t.registry, 'boxrelay_outbox_pending', { sink: 'nats' })).toBe(50);
  expect(await metricValue(t.registry, 'boxrelay_sink_up', { sink: 'nats' })).toBe(0);

  await nats.start();
  await waitFor(async () => (await outboxRows(t, 'nats')).every((r) => r.status === 'done'), 'all 50 to be published', 20_000);

  const client = await natsClient(nats.url);
  defer(() => client.close());
  const info = await client.jsm.streams.info(stream);
  expect(info.state.messages).toBe(50);
  const ids = new Set<string>();
  for (let seq = 1; seq <= 50; seq++) ids.add((await client.jsm.streams.getMessage(stream, { seq }))!.header.get('Nats-Msg-Id'));
  const rows = await outboxRows(t, 'nats');
  expect(ids).toEqual(new Set(rows.map((r) => r.delivery_id)));
  expect(await metricValue(t.registry, 'boxrelay_sink_deliveries_total', { sink: 'nats', outcome: 'delivered' })).toBe(50);
});

it('authenticates with the configured user and password, or token, and stays down (logged) with wrong ones', async () => {
  const withUser = await ownNats(['--user', 'relay', '--pass', 's3cret-pass']);
  defer(() => withUser.kill());
  const withToken = await ownNats(['--auth', 's3cret-token']);
  defer(() => withToken.kill());
  const natsCheck = async (t: TestRelay) => (await request(t.relay.internalApp).get('/readyz')).body.checks.nats as string;

  const good = [
    await relay({ natsUrl: withUser.url, natsUser: 'relay', natsPassword: 's3cret-pass' }),
    await relay({ natsUrl: withToken.url, natsToken: 's3cret-token' }),
  ];
  for (const t of good) await waitFor(async () => (await natsCheck(t)) === 'ok', 'an authenticated connection');

  const wrong = await relay({ natsUrl: withUser.url, natsUser: 'relay', natsPassword: 'wrong-pass' }, { nats: { backoff: { minMs: 50, maxMs: 100 } } });
  await wrong.logs.waitFor((entry) => entry.msg === 'NATS unreachable; deliveries wait in the outbox');
  expect(await natsCheck(wrong)).toBe('down');
  expect(wrong.logs.text()).not.toContain('wrong-pass');
  expect((await wrong.post()).status).toBe(200);
});
