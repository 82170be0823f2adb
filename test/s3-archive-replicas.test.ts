import pg from 'pg';
import { expect, it } from 'vitest';
import { archiveObjects, s3Ready, fauxqsForFile } from './support/aws.js';
import { postgresSchema } from './support/databases.js';
import { waitFor } from './support/fanout.js';
import { fanoutFixture } from './support/fanout-relay.js';
import { allSettled, leasedWork } from './support/leased-work.js';
import type { RelayProcess } from './support/process.js';
import { SECRET, delivery } from './support/sign.js';

/**
 * Contract section 20 as amended: the archive exactly once with several replicas, when one stalls.
 * A replica frozen (SIGSTOP) past its leases while it holds an open object, its partitions taken
 * over and archived by the other with newer events, then resumed: it writes no object with events
 * it no longer holds, so its smaller object never replaces the other's.
 */
const { defer, serve } = fanoutFixture();

const aws = fauxqsForFile();


async function post(relay: RelayProcess, boxId: string): Promise<string> {
  const d = delivery({ boxId, timestamp: Math.floor(Date.now() / 1000) });
  const res = await fetch(`http://127.0.0.1:${relay.port}/webhooks`, { method: 'POST', headers: d.headers, body: d.body, signal: AbortSignal.timeout(10_000) });
  expect(res.status).toBe(200);
  return d.id;
}

const stopped = (relay: RelayProcess) =>
  new Promise((resolve) => {
    relay.child.once('exit', resolve);
    relay.child.kill('SIGTERM');
  });

it('a replica stopped (SIGSTOP) past its lease while it holds an open archive object, then resumed: every accepted event in exactly one object', { timeout: 120_000 }, async () => {
  const bucket = await aws().bucket();
  const database = await postgresSchema();
  const env = {
    BOXRELAY_SECRETS: SECRET,
    BOXRELAY_DATABASE: database,
    AWS_ACCESS_KEY_ID: 'test',
    AWS_SECRET_ACCESS_KEY: 'test',
    BOXRELAY_AWS_REGION: 'us-east-1',
    BOXRELAY_AWS_ENDPOINT: aws().endpoint,
    BOXRELAY_S3_ARCHIVE: `s3://${bucket}/archive`,
    BOXRELAY_S3_ARCHIVE_MAX_EVENTS: '1000',
    BOXRELAY_S3_ARCHIVE_MAX_AGE: '4s',
    BOXRELAY_OUTBOX_POLL_MS: '100',
    BOXRELAY_OUTBOX_LEASE_MS: '2000',
  };
  const [a, b] = (await Promise.all([serve(env), serve(env)])) as [RelayProcess, RelayProcess];
  await waitFor(async () => (await s3Ready(a)) && (await s3Ready(b)), 'the archive to be reachable from both replicas');
  const db = new pg.Client(database);
  await db.connect();
  defer(() => db.end());

  const boxes = Array.from({ length: 16 }, (_, i) => `bx_${i}`);
  const accepted: string[] = [];
  for (const box of boxes) accepted.push(await post(a, box));
  // A holds some of the archive's partitions with these events read into its open object, which waits its age (4 s).
  await waitFor(async () => (await leasedWork(db, a, { live: true })).some((work) => work.sink === 's3'), 'replica A to hold archive work');
  a.child.kill('SIGSTOP');
  defer(async () => a.child.kill('SIGCONT'));

  // A's leases run out; B takes its partitions and archives their events with newer ones of the same boxes.
  await waitFor(async () => (await leasedWork(db, a, { live: true })).length === 0, 'replica A\'s leases to run out', 30_000);
  for (const box of boxes) accepted.push(await post(b, box));
  await waitFor(() => allSettled(db), 'replica B to archive every event', 30_000);
  const beforeResume = await archiveObjects(aws().s3, bucket);

  // A resumes: its open object is past its age and goes to be written at once, but A holds none of it any more.
  a.child.kill('SIGCONT');
  for (const box of boxes) accepted.push(await post(a, box));
  await waitFor(() => allSettled(db), 'every event archived once A continued', 30_000);
  await Promise.all([stopped(a), stopped(b)]);

  const objects = await archiveObjects(aws().s3, bucket);
  const archived = objects.flatMap((object) => object.events.map((event) => event.id));
  // Each accepted event in exactly one object, none missed.
  expect([...archived].sort()).toEqual([...accepted].sort());
  // No object written before A resumed was written over with less.
  for (const before of beforeResume) {
    const now = objects.find((object) => object.key === before.key);
    expect(now?.events.map((event) => event.id), before.key).toEqual(before.events.map((event) => event.id));
  }
});
