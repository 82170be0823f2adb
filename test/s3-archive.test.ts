import { gzipSync } from 'node:zlib';
import { PutObjectCommand } from '@aws-sdk/client-s3';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { toCloudEvent } from '../src/events/cloudevent.js';
import { openStore } from '../src/store/store.js';
import type { BusTuning } from '../src/sinks/bus.js';
import { eventJson } from '../src/sinks/failures.js';
import { archiveKey } from '../src/sinks/s3-archive.js';
import { archiveObjects, ownFauxqs, type OwnFauxqs } from './support/aws.js';
import { busUp, readyz } from './support/buses.js';
import { engines } from './support/databases.js';
import { adminAuth, allDelivered, fanoutFixture, hook, metricValue, outboxRows, unfinishedIds } from './support/fanout-relay.js';
import { waitFor } from './support/fanout.js';
import type { TestRelay } from './support/relay.js';
import { HandTimers } from './support/timers.js';

const { defer, relay } = fanoutFixture();

let aws: OwnFauxqs;
beforeAll(async () => {
  aws = await ownFauxqs();
});
afterAll(() => aws.stop());

const KEY = /^archive\/prod\/(\d{4})\/(\d{2})\/(\d{2})\/(\d{2})\/([^/]+)\.ndjson\.gz$/;

it('names an object after its first event as receivers dedupe it: two accounts\' events of one id never share a key (contract sections 20, 21)', () => {
  const event = { specversion: '1.0', id: 'evt_same', source: 'sandbox', type: 'box.ready', time: '2026-11-21T10:15:00.000Z', datacontenttype: 'application/json', data: {}, boxrelayaccount: 'default' } as const;
  expect(archiveKey('archive', event)).toBe('archive/2026/11/21/10/evt_same.ndjson.gz');
  expect(archiveKey('archive', { ...event, boxrelayaccount: 'staging' })).toBe('archive/2026/11/21/10/staging_evt_same.ndjson.gz');
});

describe.each(engines)('the S3 archive on $name', (engine) => {
  const archiveRelay = async (bucket: string, extra: Record<string, unknown> = {}, endpoint = aws.endpoint, tuning: BusTuning = {}): Promise<TestRelay> => {
    const t = await relay(
      { database: await engine.migratedUrl(), awsEndpoint: endpoint, s3Archive: `s3://${bucket}/archive/prod`, ...extra },
      { buses: { ackTimeoutMs: 2000, backoff: { minMs: 50, maxMs: 300 }, ...tuning } },
    );
    await busUp(t, 's3');
    return t;
  };

  it('writes full objects of BOXRELAY_S3_ARCHIVE_MAX_EVENTS events as gzip NDJSON, in accepted order, under the hour of the first event; a partial one after its age; delivered only once written', async () => {
    const bucket = await aws.bucket();
    const timers = new HandTimers();
    const t = await archiveRelay(bucket, { s3ArchiveMaxEvents: 5, s3ArchiveMaxAge: '3s' }, aws.endpoint, { timers });
    const posted: string[] = [];
    for (let i = 0; i < 12; i++) {
      const answer = await t.post({ boxId: `bx_${i % 4}`, type: i % 2 ? 'box.ready' : 'box.error' });
      expect(answer.status).toBe(200);
      posted.push(answer.deliveryId);
    }
    const delivered = () => metricValue(t.registry, 'boxrelay_sink_deliveries_total', { sink: 's3', outcome: 'delivered' });
    await waitFor(async () => (await delivered()) === 10 && timers.planned.length === 1, 'two full objects written, the third waiting for its age');
    // The last two wait for their object's age: not delivered while it is not written.
    expect(await archiveObjects(aws.s3, bucket)).toHaveLength(2);
    // The cursor's move over the ten written is stored a few times a second, after their count.
    const unwritten = await waitFor(async () => {
      const ids = await unfinishedIds(t, 's3');
      return ids.size <= 2 ? ids : undefined;
    }, 'the cursor stored past the two full objects');
    expect([...unwritten].sort()).toEqual(posted.slice(10).sort());

    expect(await timers.fire()).toBe(3000);
    await allDelivered(t, 's3');
    expect(await delivered()).toBe(12);

    const objects = await archiveObjects(aws.s3, bucket);
    const inOrder = objects.sort((a, b) => posted.indexOf(a.events[0]!.id) - posted.indexOf(b.events[0]!.id));
    expect(inOrder.map((o) => o.events.length)).toEqual([5, 5, 2]);
    expect(inOrder.flatMap((o) => o.events.map((e) => e.id))).toEqual(posted);
    for (const { key, events } of inOrder) {
      const [, yyyy, mm, dd, hh, first] = KEY.exec(key)!;
      expect(first).toBe(events[0]!.id);
      expect(`${yyyy}-${mm}-${dd}T${hh}`).toBe(new Date(events[0]!.time).toISOString().slice(0, 13));
      for (const event of events) expect(event).toMatchObject({ specversion: '1.0', source: 'sandbox' });
    }
    expect((await readyz(t)).checks.s3).toBe('ok');
  });

  it('archives operator events too; a replay for s3 writes new objects with a suffix, never over an existing one', async () => {
    const bucket = await aws.bucket();
    const t = await archiveRelay(bucket, { s3ArchiveMaxEvents: 3, s3ArchiveMaxAge: '500ms', hooks: [hook('alerts', 'http://127.0.0.1:9/h', { events: ['box.never'] })] });
    const since = new Date(t.clock.now() - 1000).toISOString();
    for (let i = 0; i < 3; i++) expect((await t.post({ boxId: `bx_${i}` })).status).toBe(200);
    await allDelivered(t, 's3');
    const before = await archiveObjects(aws.s3, bucket);
    expect(before).toHaveLength(1);

    const replay = await request(t.relay.internalApp).post('/admin/replay').set(adminAuth).send({ since, sink: 's3' });
    expect(replay.body).toEqual({ ok: true, queued: 3 });
    await allDelivered(t, 's3');
    const after = await archiveObjects(aws.s3, bucket);
    expect(after).toHaveLength(2);
    const original = after.find((o) => o.key === before[0]!.key)!;
    expect(original.events).toEqual(before[0]!.events);
    const replayed = after.find((o) => o.key !== before[0]!.key)!;
    expect(replayed.key).toMatch(new RegExp(`/${replayed.events[0]!.id}-replay-[a-z0-9]+\\.ndjson\\.gz$`));
    expect(replayed.events.map((e) => e.id).sort()).toEqual(before[0]!.events.map((e) => e.id).sort());

    await request(t.relay.internalApp).post('/admin/sinks/alerts/pause').set(adminAuth).expect(200);
    await waitFor(async () => (await archiveObjects(aws.s3, bucket)).some((o) => o.events.some((e) => e.type === 'boxrelay.sink.paused')), 'the operator event archived', 20_000);
  });

  it('after a crash that left objects past the stored cursor, a partial one among them, forms the same objects again: each event archived once, no object written with fewer', async () => {
    const bucket = await aws.bucket();
    const database = await engine.migratedUrl();
    // The crashed process: 13 events of one box accepted for the archive, its cursor stored before the first.
    const before = await relay({ database, s3Archive: `s3://${bucket}/archive/prod` }, { start: false });
    const posted: string[] = [];
    for (let i = 0; i < 13; i++) posted.push((await before.post({ boxId: 'bx_crash' })).deliveryId);
    const stored = await before.relay.store.database.kysely.selectFrom('deliveries').select(['id', 'payload']).where('id', 'in', posted).execute();
    const payloads = new Map(stored.map((row) => [row.id, row.payload]));
    const events = posted.map((id) => toCloudEvent(payloads.get(id)!, before.config.source));
    await before.close();
    // What it wrote before it crashed: a partial object (its age) and two full ones (of 5).
    const written = [events.slice(0, 3), events.slice(3, 8), events.slice(8, 13)];
    for (const objectEvents of written) {
      const body = gzipSync(objectEvents.map((event) => eventJson(event)).join('\n') + '\n');
      await aws.s3.send(new PutObjectCommand({ Bucket: bucket, Key: archiveKey('archive/prod', objectEvents[0]!), Body: body }));
    }

    const t = await archiveRelay(bucket, { database, s3ArchiveMaxEvents: 5, s3ArchiveMaxAge: '500ms' });
    await allDelivered(t, 's3');
    const objects = await archiveObjects(aws.s3, bucket);
    expect(objects.flatMap((o) => o.events.map((e) => e.id)).sort()).toEqual([...posted].sort());
    expect(objects.map((o) => o.events.map((e) => e.id)).sort()).toEqual(written.map((w) => w.map((e) => e.id)).sort());
  });

  it('a stop writes the open object at once, not after its age: its events archived and delivered, the rest left to the next process', async () => {
    const bucket = await aws.bucket();
    const timers = new HandTimers();
    const database = await engine.migratedUrl();
    const t = await archiveRelay(bucket, { database, s3ArchiveMaxEvents: 100, s3ArchiveMaxAge: '5m' }, aws.endpoint, { timers });
    const posted: string[] = [];
    for (let i = 0; i < 3; i++) posted.push((await t.post({ boxId: `bx_${i}` })).deliveryId);
    await waitFor(() => timers.planned.length === 1, 'the open object to wait for its age');
    // The stop, not the age (never fired), writes the object.
    await t.close();
    const archived = (await archiveObjects(aws.s3, bucket)).flatMap((o) => o.events.map((e) => e.id));
    expect(archived.length).toBeGreaterThan(0);
    const store = await openStore({ url: database });
    defer(() => store.close());
    const left = await unfinishedIds(store, 's3');
    // Each event once: archived (and no longer the archive's work), or left for the next process.
    expect([...archived, ...left].sort()).toEqual([...posted].sort());
  });

  it('dead-letters the events of an object S3 refuses (no such bucket) at once', async () => {
    const t = await archiveRelay('no-such-bucket-here', { s3ArchiveMaxEvents: 2, s3ArchiveMaxAge: '200ms' });
    const answer = await t.post({ boxId: 'bx_1' });
    await waitFor(async () => (await outboxRows(t, 's3')).some((row) => row.delivery_id === answer.deliveryId && row.status === 'dead'), 'a dead letter');
    const [dead] = await outboxRows(t, 's3');
    expect(dead!.last_error).toMatch(/^s3_no_such_bucket: /);
  });

  it('holds events while S3 is down and archives each exactly once when it is back', async () => {
    const own = await ownFauxqs({ persist: true });
    defer(() => own.stop({ kill: true }));
    const bucket = await own.bucket();
    const t = await archiveRelay(bucket, { s3ArchiveMaxEvents: 4, s3ArchiveMaxAge: '300ms' }, own.endpoint);
    const posted: string[] = [];
    const post = async (n: number) => {
      for (let i = 0; i < n; i++) posted.push((await t.post({ boxId: `bx_${i % 3}` })).deliveryId);
    };
    await post(8);
    await allDelivered(t, 's3');
    await own.stop({ kill: true });
    await post(10);
    await waitFor(async () => (await readyz(t)).checks.s3 === 'down', 'S3 to be seen down');
    await own.start();
    await allDelivered(t, 's3', 30_000);
    const ids = (await archiveObjects(own.s3, bucket)).flatMap((o) => o.events.map((e) => e.id));
    expect(ids.sort()).toEqual([...posted].sort());
    expect(await outboxRows(t, 's3')).toEqual([]);
  }, 60_000);
});
