import { rm } from 'node:fs/promises';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import request from 'supertest';
import { expect, it } from 'vitest';
import { testCertificates } from './support/certificates.js';
import { allDelivered, fanoutFixture, fastTuning, metricValue, outboxRows } from './support/fanout-relay.js';
import { waitFor } from './support/fanout.js';
import { natsClient, ownNats, uniqueNames } from './support/nats.js';
import type { TestRelay } from './support/relay.js';

const { defer, relay } = fanoutFixture();

it('accepts deliveries while NATS is down and publishes each once when it is back', async () => {
  const nats = await ownNats();
  defer(() => nats.kill());
  const { prefix, stream } = uniqueNames();
  const t = await relay({ natsUrl: nats.url, natsSubjectPrefix: prefix, natsStream: stream }, { buses: { backoff: { minMs: 50, maxMs: 300 } } });
  const natsCheck = async () => (await request(t.relay.internalApp).get('/readyz')).body.checks.nats as string;
  await waitFor(async () => (await natsCheck()) === 'ok', 'NATS to be up');

  await nats.kill();
  await waitFor(async () => (await natsCheck()) === 'down', 'NATS to be seen down');
  const posted = new Set<string>();
  for (let i = 0; i < 50; i++) {
    const answer = await t.post({ boxId: `bx_${i}` });
    expect(answer.status).toBe(200);
    posted.add(answer.deliveryId);
  }
  const ready = await request(t.relay.internalApp).get('/readyz');
  expect(ready.status).toBe(200);
  expect(ready.body.checks).toEqual({ storage: 'ok', nats: 'down' });
  expect(await metricValue(t.registry, 'boxrelay_outbox_pending', { sink: 'nats' })).toBe(50);
  expect(await metricValue(t.registry, 'boxrelay_sink_up', { sink: 'nats' })).toBe(0);

  await nats.start();
  await allDelivered(t, 'nats', 20_000);

  const client = await natsClient(nats.url);
  defer(() => client.close());
  const info = await client.jsm.streams.info(stream);
  expect(info.state.messages).toBe(50);
  const ids = new Set<string>();
  for (let seq = 1; seq <= 50; seq++) ids.add((await client.jsm.streams.getMessage(stream, { seq }))!.header.get('Nats-Msg-Id'));
  expect(ids).toEqual(posted);
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

  const wrong = await relay({ natsUrl: withUser.url, natsUser: 'relay', natsPassword: 'wrong-pass' }, { buses: { backoff: { minMs: 50, maxMs: 100 } } });
  await wrong.logs.waitFor((entry) => entry.msg === 'NATS unreachable; deliveries wait in the outbox');
  expect(await natsCheck(wrong)).toBe('down');
  expect(wrong.logs.text()).not.toContain('wrong-pass');
  expect((await wrong.post()).status).toBe(200);
});

it('sets the JetStream stream up again when it is deleted while connected, then publishes the waiting event promptly', async () => {
  const nats = await ownNats();
  defer(() => nats.kill());
  const client = await natsClient(nats.url);
  defer(() => client.close());
  const { prefix, stream } = uniqueNames();
  // Scheduled retries an hour out: only the sink coming back may explain a prompt delivery.
  const t = await relay(
    { natsUrl: nats.url, natsSubjectPrefix: prefix, natsStream: stream },
    { buses: { backoff: { minMs: 50, maxMs: 300 } }, dispatch: { ...fastTuning, quickRetries: 0, retryDelayMs: () => 3_600_000 } },
  );
  const natsCheck = async () => (await request(t.relay.internalApp).get('/readyz')).body.checks.nats as string;
  await waitFor(async () => (await natsCheck()) === 'ok', 'NATS to be up');
  expect((await t.post({ boxId: 'bx_before' })).status).toBe(200);
  await allDelivered(t, 'nats');

  // Gone, and (for a while) not creatable: a stream on other subjects of the prefix overlaps it.
  expect(await client.jsm.streams.delete(stream)).toBe(true);
  await client.jsm.streams.add({ name: `${stream}_BLOCKER`, subjects: [`${prefix}.other.>`] });
  const posted = await t.post({ boxId: 'bx_after' });
  expect(posted.status).toBe(200);

  await t.logs.waitFor((entry) => entry.msg === 'JetStream stream is gone; setting it up again');
  await waitFor(async () => (await natsCheck()) === 'error', 'the refused set-up to show in /readyz');
  expect(await metricValue(t.registry, 'boxrelay_sink_up', { sink: 'nats' })).toBe(0);
  expect((await outboxRows(t, 'nats')).find((r) => r.delivery_id === posted.deliveryId)?.status).toBe('pending');

  expect(await client.jsm.streams.delete(`${stream}_BLOCKER`)).toBe(true);
  await allDelivered(t, 'nats');
  const info = await client.jsm.streams.info(stream);
  expect(info.config.subjects).toEqual([`${prefix}.>`]);
  expect(info.state.messages).toBe(1);
  expect((await client.jsm.streams.getMessage(stream, { seq: 1 }))!.header.get('Nats-Msg-Id')).toBe(posted.deliveryId);
  // Two attempts: the one refused while the stream was gone, then the one that was acked.
  expect(await metricValue(t.registry, 'boxrelay_sink_deliveries_total', { sink: 'nats', outcome: 'retried' })).toBe(1);
  expect(await metricValue(t.registry, 'boxrelay_sink_deliveries_total', { sink: 'nats', outcome: 'delivered' })).toBe(2);
  expect(await natsCheck()).toBe('ok');
  expect(await metricValue(t.registry, 'boxrelay_sink_up', { sink: 'nats' })).toBe(1);
  expect(t.logs.entries().filter((e) => e.msg === 'created the JetStream stream')).toHaveLength(2);
  expect(t.logs.entries().filter((e) => e.msg === 'JetStream stream is gone; setting it up again')).toHaveLength(1);
});

it('publishes over TLS to a server whose certificate the configured CA file signed, and stays down without it', async () => {
  const certs = testCertificates();
  defer(() => rm(certs.dir, { recursive: true, force: true }));
  const nats = await ownNats(['--tls', '--tlscert', certs.cert, '--tlskey', certs.key]);
  defer(() => nats.kill());
  const { prefix, stream } = uniqueNames();
  const natsCheck = async (t: TestRelay) => (await request(t.relay.internalApp).get('/readyz')).body.checks.nats as string;

  const t = await relay({ natsUrl: nats.url, natsSubjectPrefix: prefix, natsStream: stream, natsTlsCaFile: certs.ca });
  await waitFor(async () => (await natsCheck(t)) === 'ok', 'a TLS connection');
  const posted = await t.post();
  expect(posted.status).toBe(200);
  await allDelivered(t, 'nats');
  const client = await connect({ servers: nats.url, tls: { caFile: certs.ca } });
  defer(() => client.close());
  const message = await (await jetstreamManager(client)).streams.getMessage(stream, { seq: 1 });
  expect(message?.header.get('Nats-Msg-Id')).toBe(posted.deliveryId);

  // Without the CA the server's certificate is not trusted: the sink stays down, the receiver up.
  const untrusting = await relay({ natsUrl: nats.url, natsSubjectPrefix: prefix, natsStream: stream }, { buses: { backoff: { minMs: 50, maxMs: 100 } } });
  await untrusting.logs.waitFor((entry) => entry.msg === 'NATS unreachable; deliveries wait in the outbox');
  expect(await natsCheck(untrusting)).toBe('down');
  expect((await untrusting.post()).status).toBe(200);
});
