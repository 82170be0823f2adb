import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import request from 'supertest';
import { expect, it } from 'vitest';
import { toCloudEvent } from '../src/events/cloudevent.js';
import type { ParsedEvent } from '../src/events/parse-event.js';
import { MAX_SUBJECT_BYTES } from '../src/sinks/nats.js';
import { allDelivered, fanoutFixture, metricValue, outboxRows } from './support/fanout-relay.js';
import { waitFor } from './support/fanout.js';
import { natsClient, ownNats, uniqueNames } from './support/nats.js';
import type { TestRelay } from './support/relay.js';
import { eventId } from './support/sign.js';

const { defer, relay } = fanoutFixture();

/** A nats-server config file of the test's own; rewritten in place to change it before a restart. */
function natsConfig(text: string): { path: string; write(text: string): void } {
  const path = join(mkdtempSync(join(tmpdir(), 'boxrelay-nats-conf-')), 'nats.conf');
  writeFileSync(path, text);
  return { path, write: (next) => writeFileSync(path, next) };
}

/**
 * Users of a server with permissions: `relay` may publish on `publish` only (and read its request
 * answers); a client without credentials is `admin`, allowed everything.
 */
const usersConfig = (publish: string[]) => `
no_auth_user: admin
authorization {
  users = [
    { user: admin, password: admin-pass }
    { user: relay, password: relay-pass, permissions: { publish: { allow: ${JSON.stringify(publish)} }, subscribe: { allow: ["_INBOX.>"] } } }
  ]
}
`;

const natsCheck = async (t: TestRelay) => (await request(t.relay.internalApp).get('/readyz')).body as { checks: Record<string, string>; errors?: Record<string, string> };

/** Stores an event for the NATS sink as it could be stored before the receiver had limits (lengths and depth unchecked). */
async function storedEvent(t: TestRelay, options: { id?: string; type?: string; boxId: string; data?: Record<string, unknown>; nestedLevels?: number }): Promise<string> {
  const id = options.id ?? eventId();
  const createdAt = new Date(t.clock.now()).toISOString();
  const type = options.type ?? 'box.ready';
  const data = { box: { id: options.boxId }, ...options.data };
  // Built as text: JSON.stringify cannot write what is nested that deep.
  const nested = options.nestedLevels ? `,"nested":${'['.repeat(options.nestedLevels)}${']'.repeat(options.nestedLevels)}` : '';
  const event: ParsedEvent = {
    id,
    type,
    createdAt,
    createdAtIso: createdAt,
    boxId: options.boxId,
    boxName: null,
    state: null,
    previousState: null,
    payload: JSON.stringify({ id, type, createdAt, data }).replace(/}}$/, `${nested}}}`),
  };
  await t.relay.store.writer.record({ event, receivedAt: t.clock.now(), attempt: 1, sinks: ['nats'] });
  t.relay.fanout.wake();
  return id;
}

/** Padding that makes the event's CloudEvent exactly `bytes` long. */
function paddingFor(t: TestRelay, bytes: number, boxId: string): string {
  const sized = (pad: string) =>
    Buffer.byteLength(JSON.stringify(toCloudEvent(JSON.stringify({ id: eventId(), type: 'box.ready', createdAt: new Date(t.clock.now()).toISOString(), data: { box: { id: boxId }, pad } }), t.config.source)));
  return 'x'.repeat(bytes - sized(''));
}

it('dead-letters at once an event NATS can never take (subject, max_payload, nesting, id), keeps the connection and sends the others', async () => {
  const nats = await ownNats(['-c', natsConfig('max_payload: 1024\n').path]);
  defer(() => nats.kill());
  const { prefix, stream } = uniqueNames();
  const t = await relay({ natsUrl: nats.url, natsSubjectPrefix: prefix, natsStream: stream });
  await waitFor(async () => (await natsCheck(t)).checks.nats === 'ok', 'NATS to be up');

  const first = await storedEvent(t, { boxId: 'bx_first' });
  const longSubject = await storedEvent(t, { boxId: `bx_${'l'.repeat(MAX_SUBJECT_BYTES)}` });
  const tooLarge = (await t.post({ boxId: 'bx_large', boxName: 'n'.repeat(2000) })).deliveryId;
  // The payload alone fits max_payload; with the Nats-Msg-Id header it does not.
  const withHeaders = await storedEvent(t, { boxId: 'bx_edge', data: { pad: paddingFor(t, 1000, 'bx_edge') } });
  const tooDeep = await storedEvent(t, { boxId: 'bx_deep', nestedLevels: 10_000 });
  const badId = await storedEvent(t, { id: `${eventId()}\r\nX: y`, boxId: 'bx_bad_id' });
  const last = await storedEvent(t, { boxId: 'bx_last' });

  const dead = await waitFor(async () => {
    const rows = await outboxRows(t, 'nats');
    return rows.length === 5 && rows.every((r) => r.status === 'dead') ? rows : undefined;
  }, 'the five unsendable events to be dead letters');
  const lastErrors = new Map(dead.map((r) => [r.delivery_id, r.last_error]));
  expect(lastErrors.get(longSubject)).toBe(`nats_subject_too_long: subject of ${prefix.length + 'box.ready.bx_'.length + 1 + MAX_SUBJECT_BYTES} bytes exceeds NATS's limit of ${MAX_SUBJECT_BYTES} bytes`);
  expect(lastErrors.get(tooLarge)).toMatch(/^nats_payload_too_large: event of \d+ bytes \(with headers\) exceeds the server's max_payload of 1024 bytes$/);
  expect(lastErrors.get(withHeaders)).toMatch(/^nats_payload_too_large: event of 10\d\d bytes/);
  expect(lastErrors.get(tooDeep)).toBe('event_not_serializable: the event cannot be serialized as JSON (nested too deeply)');
  expect(lastErrors.get(badId)).toBe('nats_invalid_message: the event id cannot be a NATS header value');
  // One attempt each: nothing was retried.
  expect(dead.map((r) => r.attempts)).toEqual([1, 1, 1, 1, 1]);

  const client = await natsClient(nats.url);
  defer(() => client.close());
  const sent = [];
  for (let seq = 1; seq <= (await client.jsm.streams.info(stream)).state.messages; seq++) {
    sent.push((await client.jsm.streams.getMessage(stream, { seq }))!.header.get('Nats-Msg-Id'));
  }
  expect(sent.sort()).toEqual([first, last].sort());
  expect(await metricValue(t.registry, 'boxrelay_sink_up', { sink: 'nats' })).toBe(1);
  expect(await metricValue(t.registry, 'boxrelay_sink_deliveries_total', { sink: 'nats', outcome: 'dead_lettered' })).toBe(5);
  expect(await metricValue(t.registry, 'boxrelay_sink_deliveries_total', { sink: 'nats', outcome: 'retried' })).toBe(0);
  expect(t.logs.entries().filter((e) => e.msg === 'NATS disconnected; deliveries wait in the outbox')).toEqual([]);
  expect((await natsCheck(t)).checks.nats).toBe('ok');
});

it('publishes a subject of exactly the limit without harm to the connection', async () => {
  const nats = await ownNats();
  defer(() => nats.kill());
  const { prefix, stream } = uniqueNames();
  const t = await relay({ natsUrl: nats.url, natsSubjectPrefix: prefix, natsStream: stream });
  await waitFor(async () => (await natsCheck(t)).checks.nats === 'ok', 'NATS to be up');
  const boxId = `bx_${'l'.repeat(MAX_SUBJECT_BYTES - `${prefix}.box.ready.bx_`.length)}`;
  const atLimit = await storedEvent(t, { boxId });
  const after = await storedEvent(t, { boxId: 'bx_after' });
  await allDelivered(t, 'nats');
  const client = await natsClient(nats.url);
  defer(() => client.close());
  const subjects = new Map<string, number>();
  for (const seq of [1, 2]) {
    const message = (await client.jsm.streams.getMessage(stream, { seq }))!;
    subjects.set(message.header.get('Nats-Msg-Id'), message.subject.length);
  }
  expect(subjects).toEqual(new Map([[atLimit, MAX_SUBJECT_BYTES], [after, `${prefix}.box.ready.bx_after`.length]]));
  expect(t.logs.entries().filter((e) => e.msg === 'NATS disconnected; deliveries wait in the outbox')).toEqual([]);
});

for (const natsMode of ['jetstream', 'core'] as const) {
  it(`dead-letters at once an event whose subject the NATS user may not publish on, and sends the others (${natsMode})`, async () => {
    const { prefix, stream } = uniqueNames();
    const nats = await ownNats(['-c', natsConfig(usersConfig([`${prefix}.box.ready.>`, '$JS.API.>'])).path]);
    defer(() => nats.kill());
    const t = await relay({ natsUrl: nats.url, natsMode, natsSubjectPrefix: prefix, natsStream: stream, natsUser: 'relay', natsPassword: 'relay-pass' });
    await waitFor(async () => (await natsCheck(t)).checks.nats === 'ok', 'NATS to be up');

    const denied = (await t.post({ type: 'box.error', boxId: 'bx_denied' })).deliveryId;
    const allowed = (await t.post({ type: 'box.ready', boxId: 'bx_allowed' })).deliveryId;
    const row = await waitFor(async () => (await outboxRows(t, 'nats')).find((r) => r.status === 'dead'), 'the denied event to be a dead letter');
    expect(row).toMatchObject({
      delivery_id: denied,
      attempts: 1,
      last_error: `nats_permission_denied: NATS refused publishing to ${prefix}.box.error.bx_denied (permissions violation)`,
    });
    await waitFor(async () => (await outboxRows(t, 'nats')).every((r) => r.delivery_id !== allowed), 'the allowed event to be sent');
    if (natsMode === 'jetstream') {
      const client = await natsClient(nats.url);
      defer(() => client.close());
      expect((await client.jsm.streams.getMessage(stream, { seq: 1 }))?.header.get('Nats-Msg-Id')).toBe(allowed);
      expect((await client.jsm.streams.info(stream)).state.messages).toBe(1);
    }

    // Up for every other subject, with the refusal shown.
    const ready = await waitFor(async () => {
      const body = await natsCheck(t);
      return body.errors?.nats ? body : undefined;
    }, 'the refusal to show in /readyz');
    expect(ready.checks.nats).toBe('ok');
    expect(ready.errors?.nats).toBe(`NATS refused publishing to ${prefix}.box.error.bx_denied (permissions violation); such events are dead letters`);
    expect(await metricValue(t.registry, 'boxrelay_sink_up', { sink: 'nats' })).toBe(1);
    await t.logs.waitFor((e) => e.msg === 'NATS refused a publish (permissions violation); events on that subject are dead letters');
    expect(t.logs.entries().find((e) => e.msg === 'delivery failed for good: dead letter')).toMatchObject({ error: row.last_error });
  });
}

it('sets the stream up on the new connection when the server that refused it comes back allowing it', async () => {
  const { prefix, stream } = uniqueNames();
  // First the relay's user may look streams up but not create one.
  const config = natsConfig(usersConfig([`${prefix}.>`, '$JS.API.INFO', '$JS.API.STREAM.NAMES', '$JS.API.STREAM.INFO.>']));
  const nats = await ownNats(['-c', config.path]);
  defer(() => nats.kill());
  // A refused set-up is tried again only after a minute: only the reconnect may explain a prompt recovery.
  const t = await relay(
    { natsUrl: nats.url, natsSubjectPrefix: prefix, natsStream: stream, natsUser: 'relay', natsPassword: 'relay-pass' },
    { buses: { backoff: { minMs: 50, maxMs: 60_000 } } },
  );
  const refused = await waitFor(async () => {
    const body = await natsCheck(t);
    return body.checks.nats === 'error' ? body : undefined;
  }, 'the refused set-up to show');
  expect(refused.errors?.nats).toMatch(new RegExp(`JetStream stream ${stream} for .* could not be set up: Permissions Violation`));
  const posted = await t.post();

  config.write(usersConfig([`${prefix}.>`, '$JS.API.>']));
  await nats.kill();
  await nats.start();
  await waitFor(async () => (await natsCheck(t)).checks.nats === 'ok', 'the sink to be up on the new connection');
  await allDelivered(t, 'nats');
  const client = await natsClient(nats.url);
  defer(() => client.close());
  expect((await client.jsm.streams.getMessage(stream, { seq: 1 }))?.header.get('Nats-Msg-Id')).toBe(posted.deliveryId);
  expect(await metricValue(t.registry, 'boxrelay_sink_up', { sink: 'nats' })).toBe(1);
});
