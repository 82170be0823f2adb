import request from 'supertest';
import { describe, expect, it } from 'vitest';
import { subjectFor, subjectCovers } from '../src/sinks/nats-subject.js';
import { adminAuth, allDelivered, fanoutFixture, hook, metricValue, outboxRows, pendingCount } from './support/fanout-relay.js';
import { waitFor } from './support/fanout.js';
import { SHARED_NATS, collect, natsClient, uniqueNames } from './support/nats.js';
import type { TestRelay } from './support/relay.js';

describe('NATS subjects', () => {
  it('sanitizes each type token and the box id, code point by code point', () => {
    expect(subjectFor('sandbox', { type: 'box.error', subject: 'bx_abc' })).toBe('sandbox.box.error.bx_abc');
    expect(subjectFor('sandbox', { type: 'box.error', subject: 'bx.a*b> c' })).toBe('sandbox.box.error.bx_a_b__c');
    expect(subjectFor('sandbox', { type: 'box..état', subject: '😀-x' })).toBe('sandbox.box._._tat._-x');
    expect(subjectFor('p.q', { type: 'deploy.done' })).toBe('p.q.deploy.done._');
    expect(subjectFor('p', { type: 'x', subject: '' })).toBe('p.x._');
  });

  it('knows which stream subjects capture a prefix', () => {
    expect(subjectCovers('sandbox.>', 'sandbox.>')).toBe(true);
    expect(subjectCovers('>', 'sandbox.>')).toBe(true);
    expect(subjectCovers('*.>', 'sandbox.>')).toBe(true);
    expect(subjectCovers('sandbox.box.>', 'sandbox.>')).toBe(false);
    expect(subjectCovers('sandbox.*', 'sandbox.>')).toBe(false);
    expect(subjectCovers('other.>', 'sandbox.>')).toBe(false);
  });
});

describe('NATS sink (shared nats-server)', () => {
  const { defer, server, relay } = fanoutFixture();

  const setup = async (overrides: Record<string, unknown> = {}) => {
    const names = uniqueNames();
    const client = await natsClient();
    defer(() => client.close());
    client.streams.push(names.stream);
    const t = await relay(
      { natsUrl: SHARED_NATS, natsSubjectPrefix: names.prefix, natsStream: names.stream, ...overrides },
      { start: false },
    );
    return { ...names, client, t };
  };
  const natsUp = (t: TestRelay) =>
    waitFor(async () => (await request(t.relay.internalApp).get('/readyz')).body.checks?.nats === 'ok', 'NATS to be up');

  it('publishes each event type on its subject with the CloudEvent and Nats-Msg-Id (JetStream)', async () => {
    const { prefix, stream, client, t } = await setup({ natsDuplicateWindow: '2m' });
    const all = collect(client.nc, `${prefix}.>`);
    const errors = collect(client.nc, `${prefix}.box.error.>`);
    await t.relay.start();
    await natsUp(t);

    const posted = [];
    for (const [type, boxId] of [
      ['box.ready', 'bx_1'],
      ['box.error', 'bx.a*b> c'],
      ['box.archived', 'bx_1'],
      ['box.hydrated', 'bx_1'],
      ['box.error', 'bx_2'],
    ] as const) {
      const response = await t.post({ type, boxId });
      expect(response.status).toBe(200);
      posted.push({ id: response.deliveryId, type, boxId });
    }
    const messages = await all.received(5);
    const byId = new Map(messages.map((m) => [m.headers?.get('Nats-Msg-Id'), m]));
    expect(byId.size).toBe(5);
    const expectedBox: Record<string, string> = { bx_1: 'bx_1', bx_2: 'bx_2', 'bx.a*b> c': 'bx_a_b__c' };
    for (const p of posted) {
      const msg = byId.get(p.id)!;
      expect(msg.subject).toBe(`${prefix}.${p.type}.${expectedBox[p.boxId]}`);
      expect(msg.json()).toMatchObject({ specversion: '1.0', id: p.id, type: p.type, subject: p.boxId, source: 'sandbox', boxrelayaccount: 'default' });
    }
    await waitFor(() => errors.messages.length === 2, 'both errors');
    expect(errors.messages.map((m) => m.json<{ type: string }>().type)).toEqual(['box.error', 'box.error']);

    const info = await client.jsm.streams.info(stream);
    expect(info.config.subjects).toEqual([`${prefix}.>`]);
    expect(info.config.duplicate_window).toBe(120_000_000_000);
    // BOXRELAY_NATS_MAX_AGE unset: the retention window, so the stream cannot grow without bound.
    expect(info.config.max_age).toBe(t.config.retentionDays * 86_400 * 1e9);
    await waitFor(async () => (await client.jsm.streams.info(stream)).state.messages === 5, 'the stream to hold 5 messages');
    await allDelivered(t, 'nats');
    expect(await metricValue(t.registry, 'boxrelay_sink_deliveries_total', { sink: 'nats', outcome: 'delivered' })).toBe(5);
    expect(await metricValue(t.registry, 'boxrelay_sink_deliveries_total', { sink: 'nats', outcome: 'retried' })).toBe(0);
    expect(await metricValue(t.registry, 'boxrelay_sink_up', { sink: 'nats' })).toBe(1);
  });

  it('reuses a stream that already captures the subjects, and JetStream drops a replay inside its window', async () => {
    const { prefix, client, t } = await setup();
    const existing = `${uniqueNames().stream}_OLD`;
    client.streams.push(existing);
    await client.jsm.streams.add({ name: existing, subjects: [`${prefix}.>`] });
    await t.relay.start();
    await natsUp(t);

    const first = await t.post({ type: 'box.ready' });
    await waitFor(async () => (await client.jsm.streams.info(existing)).state.messages === 1, 'the message in the existing stream');
    await expect(client.jsm.streams.info(t.config.natsStream)).rejects.toThrow(/not found/);

    const replay = await request(t.relay.internalApp)
      .post('/admin/replay')
      .set(adminAuth)
      .send({ since: new Date(t.clock.now() - 1000).toISOString(), sink: 'nats' });
    expect(replay.status).toBe(202);
    expect(replay.body).toEqual({ ok: true, queued: 1 });
    await allDelivered(t, 'nats');
    expect(await metricValue(t.registry, 'boxrelay_sink_deliveries_total', { sink: 'nats', outcome: 'delivered' })).toBe(2);
    const info = await client.jsm.streams.info(existing);
    expect(info.state.messages).toBe(1);
    expect((await client.jsm.streams.getMessage(existing, { seq: 1 }))?.header.get('Nats-Msg-Id')).toBe(first.deliveryId);
  });

  it('publishes and flushes in core mode', async () => {
    const { prefix, client, t } = await setup({ natsMode: 'core' });
    const all = collect(client.nc, `${prefix}.>`);
    await t.relay.start();
    await natsUp(t);
    const posted = await t.post({ type: 'box.archived', boxId: 'bx_core' });
    const [msg] = await all.received(1);
    expect(msg!.subject).toBe(`${prefix}.box.archived.bx_core`);
    expect(msg!.headers?.get('Nats-Msg-Id')).toBe(posted.deliveryId);
    await expect(client.jsm.streams.info(t.config.natsStream)).rejects.toThrow(/not found/);
  });

  it('adds the new prefix to its own stream when the prefix changed, keeping the old subjects and messages', async () => {
    const { prefix, client, t } = await setup({ natsMaxAge: '0' });
    const oldSubjects = `${uniqueNames().prefix}.>`;
    await client.jsm.streams.add({ name: t.config.natsStream, subjects: [oldSubjects] });
    await t.relay.start();
    await natsUp(t);
    await t.post({ type: 'box.ready' });
    await waitFor(async () => (await client.jsm.streams.info(t.config.natsStream)).state.messages === 1, 'the message in the stream');
    const info = await client.jsm.streams.info(t.config.natsStream);
    expect(info.config.subjects).toEqual([oldSubjects, `${prefix}.>`]);
    expect(t.logs.text()).toContain('added the subjects to the existing JetStream stream');
  });

  it('replicas that start together all take the one stream, none reporting a refusal', async () => {
    const names = uniqueNames();
    const client = await natsClient();
    defer(() => client.close());
    client.streams.push(names.stream);
    const replicas = await Promise.all(
      Array.from({ length: 6 }, () => relay({ natsUrl: SHARED_NATS, natsSubjectPrefix: names.prefix, natsStream: names.stream }, { start: false })),
    );
    await Promise.all(replicas.map((t) => t.relay.start()));
    await Promise.all(replicas.map(natsUp));
    expect(replicas.map((t) => t.logs.text()).filter((text) => text.includes('could not be set up'))).toEqual([]);
    // JetStream takes identical creations at once as one: each replica created the stream or found it.
    for (const t of replicas) expect(t.logs.text()).toMatch(/created the JetStream stream|publishing to the existing JetStream stream/);
    expect((await client.jsm.streams.info(names.stream)).config.subjects).toEqual([`${names.prefix}.>`]);
  });

  it('reports a refused stream creation in the logs and /readyz, keeps accepting, and holds the work', async () => {
    const { prefix, client, t } = await setup();
    // Another stream holds part of the prefix's subjects: a stream on `<prefix>.>` would overlap it and is refused.
    const other = `${uniqueNames().stream}_PART`;
    client.streams.push(other);
    await client.jsm.streams.add({ name: other, subjects: [`${prefix}.box.>`] });
    await t.relay.start();
    const ready = await waitFor(async () => {
      const res = await request(t.relay.internalApp).get('/readyz');
      return res.body.checks?.nats === 'error' ? res : undefined;
    }, 'the refusal to show');
    expect(ready.status).toBe(200);
    expect(ready.body.errors.nats).toMatch(new RegExp(`JetStream stream ${t.config.natsStream} for .* could not be set up`));
    expect(t.logs.text()).toContain('could not be set up');
    expect((await t.post()).status).toBe(200);
    expect(await metricValue(t.registry, 'boxrelay_sink_up', { sink: 'nats' })).toBe(0);
    expect(await metricValue(t.registry, 'boxrelay_outbox_pending', { sink: 'nats' })).toBe(1);
  });

  it('keeps NATS flowing while a hook never answers', async () => {
    const silent = await server(() => 'hang');
    const { prefix, client, t } = await setup({ hooks: [hook('stuck', silent.url, { timeoutMs: 20_000, concurrency: 2 })], shutdownTimeoutMs: 300 });
    const all = collect(client.nc, `${prefix}.>`);
    await t.relay.start();
    await natsUp(t);
    for (let i = 0; i < 20; i++) expect((await t.post({ boxId: `bx_${i}` })).status).toBe(200);
    await all.received(20);
    // Every event reached NATS while no attempt at the hook had ended (each hangs until its 20 s
    // timeout): the NATS lane never waited on the hook's.
    expect(await pendingCount(t, 'stuck')).toBe(20);
    await silent.received(2);
    // The hook's lane holds its two slots; its other rows wait without touching the NATS lane.
    expect(silent.requests).toHaveLength(2);
    await allDelivered(t, 'nats');
    expect(await metricValue(t.registry, 'boxrelay_sink_deliveries_total', { sink: 'nats', outcome: 'delivered' })).toBe(20);
    expect(await pendingCount(t, 'stuck')).toBe(20);
    expect(await outboxRows(t, 'stuck')).toEqual([]);
  });
});
