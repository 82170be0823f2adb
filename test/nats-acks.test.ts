// JetStream acks through one inbox subscription (src/sinks/nats-acks.ts), on the shared nats-server:
// acks and duplicates, a subject no stream captures, acks that never come (one timer per turn), and
// publishes the server refused.
import { MsgHdrsImpl } from '@nats-io/transport-node';
import { afterEach, expect, it } from 'vitest';
import { createAckInbox, NoStreamCaptures } from '../src/sinks/nats-acks.js';
import { natsClient, uniqueNames } from './support/nats.js';

const clients: Awaited<ReturnType<typeof natsClient>>[] = [];
afterEach(async () => {
  for (const client of clients.splice(0)) await client.close();
});

class NoAck extends Error {}

async function setUp() {
  const client = await natsClient();
  clients.push(client);
  const { prefix, stream } = uniqueNames();
  await client.jsm.streams.add({ name: stream, subjects: [`${prefix}.>`] });
  client.streams.push(stream);
  const inbox = createAckInbox(client.nc, { timeoutMs: 300, noAck: (ms) => new NoAck(`no ack within ${ms} ms`) });
  return { client, prefix, stream, inbox };
}

const withId = (id: string) => {
  const headers = new MsgHdrsImpl();
  headers.set('Nats-Msg-Id', id);
  return headers;
};

it('resolves each publish of a turn with its ack, a duplicate (same Nats-Msg-Id) too, and the stream keeps one of each id', async () => {
  const { client, prefix, stream, inbox } = await setUp();
  await Promise.all(['a', 'b', 'c', 'a'].map((id) => inbox.publish(`${prefix}.box.ready.bx_1`, `{"id":"${id}"}`, withId(id))));
  expect((await client.jsm.streams.info(stream)).state.messages).toBe(3);
});

it('rejects a publish no stream captures with NoStreamCaptures (no responders)', async () => {
  const { inbox } = await setUp();
  await expect(inbox.publish(`${uniqueNames().prefix}.box.ready.bx_1`, '{}', withId('x'))).rejects.toBeInstanceOf(NoStreamCaptures);
});

it('ends the publishes of a turn whose acks never come together, after the timeout', async () => {
  const { client, inbox } = await setUp();
  // A plain subscriber takes the messages and never answers: no 503, no ack.
  const { prefix } = uniqueNames();
  const silent = client.nc.subscribe(`${prefix}.>`);
  await client.nc.flush();
  const outcomes = await Promise.allSettled([1, 2, 3].map((n) => inbox.publish(`${prefix}.box.ready.bx_${n}`, '{}', withId(`s${n}`))));
  expect(outcomes.map((o) => o.status === 'rejected' && o.reason instanceof NoAck && o.reason.message)).toEqual(Array(3).fill('no ack within 300 ms'));
  silent.unsubscribe();
});

it('ends the publishes awaiting an ack on a refused subject with the given error, and only those', async () => {
  const { client, inbox } = await setUp();
  const { prefix } = uniqueNames();
  const silent = client.nc.subscribe(`${prefix}.>`);
  await client.nc.flush();
  const refused = inbox.publish(`${prefix}.box.error.bx_1`, '{}', withId('r1'));
  const other = inbox.publish(`${prefix}.box.ready.bx_1`, '{}', withId('r2'));
  const denial = new Error('denied');
  inbox.refuse(`${prefix}.box.error.bx_1`, denial);
  await expect(refused).rejects.toBe(denial);
  await expect(other).rejects.toBeInstanceOf(NoAck);
  silent.unsubscribe();
});
