import { createServer, type Socket } from 'node:net';
import mqttPacket, { type IConnectPacket, type IPublishPacket, type Packet } from 'mqtt-packet';
import { expect, it } from 'vitest';
import { subjectToken } from '../src/sinks/nats-subject.js';
import { HOSTILE_BOX_IDS, busUp, expectHeld, expectListed, poster, readyz, SHARED_MQTT, mqttCollector, ownMosquitto, uniqueName } from './support/buses.js';
import { advanceAndWake, allDelivered, fanoutFixture, fastTuning, metricValue, outboxRows } from './support/fanout-relay.js';
import { waitFor } from './support/fanout.js';

const { defer, relay } = fanoutFixture();


it('publishes QoS 1, not retained, on <prefix>/<type>/<box> with the MQTT 5 properties, and lists the sink everywhere', async () => {
  const prefix = uniqueName();
  const subscriber = await mqttCollector(`${prefix}/#`);
  defer(() => subscriber.close());
  const t = await relay({ mqttUrl: SHARED_MQTT, mqttTopicPrefix: prefix });
  await busUp(t, 'mqtt');

  const posted = [];
  for (const [type, boxId] of [['box.ready', 'bx_1'], ['box.error', 'bx_abc'], ['box.archived', 'bx_2']] as const) {
    const answer = await t.post({ type, boxId });
    expect(answer.status).toBe(200);
    posted.push({ id: answer.deliveryId, type, boxId });
  }
  const messages = await subscriber.received(3);
  for (const [i, { id, type, boxId }] of posted.entries()) {
    const message = messages[i]!;
    expect(message.topic).toBe(`${prefix}/${type.replace('.', '/')}/${boxId}`);
    expect([message.qos, message.retain]).toEqual([1, false]);
    expect(message.properties?.contentType).toBe('application/cloudevents+json');
    expect(message.properties?.userProperties).toEqual({ 'ce-id': id });
    expect(JSON.parse(message.payload.toString())).toMatchObject({ specversion: '1.0', id, type, subject: boxId });
  }
  expect(messages[1]!.topic).toBe(`${prefix}/box/error/bx_abc`);
  await allDelivered(t, 'mqtt');

  await expectListed(t, 'mqtt', 3);
});

it('sanitizes topic levels: +, # and / never appear inside a level, and no event lands on another box topic', async () => {
  const prefix = uniqueName();
  const subscriber = await mqttCollector(`${prefix}/#`);
  defer(() => subscriber.close());
  const t = await relay({ mqttUrl: SHARED_MQTT, mqttTopicPrefix: prefix });
  await busUp(t, 'mqtt');
  for (const boxId of HOSTILE_BOX_IDS) expect((await t.post({ type: 'box.error', boxId })).status).toBe(200);
  expect((await t.post({ type: 'box.+/#', boxId: 'bx' })).status).toBe(200);
  const messages = await subscriber.received(HOSTILE_BOX_IDS.length + 1);
  const topics = messages.map((m) => m.topic);
  expect(topics).toEqual([...HOSTILE_BOX_IDS.map((boxId) => `${prefix}/box/error/${subjectToken(boxId)}`), `${prefix}/box/___/bx`]);
  for (const topic of topics) expect(topic.split('/').length).toBe(4);
  for (const topic of topics) expect(topic).toMatch(/^[A-Za-z0-9_-]+(\/[A-Za-z0-9_-]+)+$/);
  expect(messages.map((m) => JSON.parse(m.payload.toString()).subject)).toEqual([...HOSTILE_BOX_IDS, 'bx']);
});

it('keeps answering 200 while the broker is stopped, shows it on /readyz, and publishes every event when it is back', async () => {
  const broker = await ownMosquitto();
  defer(() => broker.stop({ kill: true }));
  // A persistent session: the broker keeps what arrives for the subscriber across its restart.
  const subscriber = await mqttCollector('sandbox/#', broker.url, { clean: false, clientId: `sub_${uniqueName()}`, properties: { sessionExpiryInterval: 300 } });
  defer(() => subscriber.close());
  const t = await relay({ mqttUrl: broker.url }, { buses: { ackTimeoutMs: 1000, backoff: { minMs: 50, maxMs: 300 } } });
  await busUp(t, 'mqtt');

  const { posted, post } = poster(t);
  await post(0, 30);
  await subscriber.received(30);
  await broker.stop();
  await waitFor(async () => (await readyz(t)).checks.mqtt === 'down', 'MQTT to be seen down');
  await post(30, 60);
  await expectHeld(t, 'mqtt', 30);

  await broker.start();
  await allDelivered(t, 'mqtt', 30_000);
  // At least once: every event arrives, each carrying its event id.
  const ids = () => new Set(subscriber.messages.map((m) => m.properties?.userProperties?.['ce-id'] as string));
  await waitFor(() => ids().size >= posted.size, 'every event to arrive', 30_000);
  expect(ids()).toEqual(posted);
});

it('a broker that stops answering: the attempt ends at the ack timeout as mqtt_timeout, waits for its retry, and the event arrives once it answers', async () => {
  const broker = await ownMosquitto();
  defer(() => broker.stop({ kill: true }));
  const subscriber = await mqttCollector('sandbox/#', broker.url);
  defer(() => subscriber.close());
  // Scheduled retries a minute out, so the test's clock decides when the second attempt starts.
  const t = await relay({ mqttUrl: broker.url }, { buses: { ackTimeoutMs: 300 }, dispatch: { ...fastTuning, quickRetries: 0, retryDelayMs: () => 60_000 } });
  await busUp(t, 'mqtt');

  broker.hang();
  defer(async () => broker.resume());
  const posted = await t.post({ boxId: 'bx_hung' });
  expect(posted.status).toBe(200);
  const [row] = await waitFor(async () => {
    const rows = await outboxRows(t, 'mqtt');
    return rows[0]?.attempts === 1 ? rows : undefined;
  }, 'the attempt to time out');
  expect(row).toMatchObject({ delivery_id: posted.deliveryId, status: 'pending', last_error: 'mqtt_timeout: no answer from mqtt within 300 ms' });
  expect(await metricValue(t.registry, 'boxrelay_sink_deliveries_total', { sink: 'mqtt', outcome: 'retried' })).toBe(1);
  // Still connected as far as the client knows: the sink stays up, the work waits for its retry.
  expect((await readyz(t)).checks.mqtt).toBe('ok');

  broker.resume();
  advanceAndWake(t, 2 * 60_000);
  await allDelivered(t, 'mqtt');
  // At least once: the first publish may arrive too, once the broker reads it.
  const arrived = await subscriber.received(1);
  expect(arrived.map((m) => m.properties?.userProperties?.['ce-id'])).toContain(posted.deliveryId);
  expect(await metricValue(t.registry, 'boxrelay_sink_deliveries_total', { sink: 'mqtt', outcome: 'delivered' })).toBe(1);
});

/**
 * A broker that speaks only MQTT 3.1.1 (as older ones do): an MQTT 5 CONNECT gets CONNACK 1
 * ("unacceptable protocol version"); 3.1.1 is served, each QoS 1 PUBLISH acknowledged.
 */
async function broker311() {
  const published: IPublishPacket[] = [];
  const versions: number[] = [];
  const sockets = new Set<Socket>();
  const server = createServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => {});
    let version = 4;
    const parser = mqttPacket.parser({ protocolVersion: 5 });
    const send = (packet: Packet) => socket.write(mqttPacket.generate(packet, { protocolVersion: 4 }));
    parser.on('packet', (packet) => {
      if (packet.cmd === 'connect') {
        version = (packet as IConnectPacket).protocolVersion ?? 4;
        versions.push(version);
        if (version !== 4) return void (send({ cmd: 'connack', returnCode: 1, sessionPresent: false }), socket.end());
        return send({ cmd: 'connack', returnCode: 0, sessionPresent: false });
      }
      if (packet.cmd === 'publish') {
        published.push(packet);
        return send({ cmd: 'puback', messageId: packet.messageId! });
      }
      if (packet.cmd === 'pingreq') return send({ cmd: 'pingresp' });
    });
    parser.on('error', () => socket.destroy());
    socket.on('data', (chunk) => parser.parse(chunk));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `mqtt://127.0.0.1:${(server.address() as { port: number }).port}`,
    published,
    versions,
    close: () => new Promise<void>((resolve) => (sockets.forEach((s) => s.destroy()), server.close(() => resolve()))),
  };
}

it('falls back to MQTT 3.1.1 when the broker refuses MQTT 5, still QoS 1 and not retained', async () => {
  const broker = await broker311();
  defer(() => broker.close());
  const t = await relay({ mqttUrl: broker.url });
  await busUp(t, 'mqtt');
  const answer = await t.post({ type: 'box.error', boxId: 'bx_old' });
  await allDelivered(t, 'mqtt');
  expect(broker.versions).toEqual([5, 4]);
  expect(broker.published.map((p) => [p.topic, p.qos, p.retain])).toEqual([['sandbox/box/error/bx_old', 1, false]]);
  expect(JSON.parse(broker.published[0]!.payload.toString()).id).toBe(answer.deliveryId);
});
