import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect, it } from 'vitest';
import { openStore } from '../src/store/store.js';
import { archiveObjects, s3Ready, heldPutProxy, fauxqsForFile } from './support/aws.js';
import { fanoutFixture, unfinishedIds } from './support/fanout-relay.js';
import { waitFor } from './support/fanout.js';
import type { RelayProcess } from './support/process.js';
import { SECRET, delivery } from './support/sign.js';

const { defer, serve } = fanoutFixture();

const aws = fauxqsForFile();


const post = async (relay: RelayProcess, boxId: string): Promise<string> => {
  const d = delivery({ timestamp: Math.floor(Date.now() / 1000), boxId });
  const res = await fetch(`http://127.0.0.1:${relay.port}/webhooks`, { method: 'POST', headers: d.headers, body: d.body });
  expect(res.status).toBe(200);
  return d.id;
};

it('after a SIGKILL between the PUT of an object and the commit, writes it again under the same key with a superset of its events, each acknowledged event archived once', async () => {
  const bucket = await aws().bucket();
  const proxy = await heldPutProxy(aws().endpoint);
  defer(() => proxy.close());
  const dir = mkdtempSync(join(tmpdir(), 'boxrelay-s3-crash-'));
  const env = {
    BOXRELAY_SECRETS: SECRET,
    BOXRELAY_DATABASE: join(dir, 'relay.db'),
    AWS_ACCESS_KEY_ID: 'test',
    AWS_SECRET_ACCESS_KEY: 'test',
    BOXRELAY_AWS_REGION: 'us-east-1',
    BOXRELAY_S3_ARCHIVE: `s3://${bucket}/archive`,
    BOXRELAY_S3_ARCHIVE_MAX_EVENTS: '5',
    BOXRELAY_S3_ARCHIVE_MAX_AGE: '2s',
    BOXRELAY_OUTBOX_POLL_MS: '200',
  };

  const first = await serve({ ...env, BOXRELAY_AWS_ENDPOINT: proxy.endpoint });
  await waitFor(() => s3Ready(first), `the archive to be reachable (${first.lines.join('\n')})`);
  const posted = [await post(first, 'bx_1'), await post(first, 'bx_2'), await post(first, 'bx_1')];
  // The three go out at their object's age; S3 writes it, the relay never hears.
  const key = await proxy.written;
  posted.push(await post(first, 'bx_3'), await post(first, 'bx_2'));
  first.child.kill('SIGKILL');
  await first.exited;

  const before = await archiveObjects(aws().s3, bucket);
  expect(before.map((o) => o.key)).toEqual([key]);
  expect(before[0]!.events.map((e) => e.id)).toEqual(posted.slice(0, 3));
  const store = await openStore({ url: env.BOXRELAY_DATABASE });
  defer(() => store.close());
  // Nothing of it was committed: every acknowledged event is still the archive's to write.
  expect(await unfinishedIds(store, 's3')).toEqual(new Set(posted));

  const second = await serve({ ...env, BOXRELAY_AWS_ENDPOINT: aws().endpoint });
  await waitFor(async () => (await unfinishedIds(store, 's3')).size === 0, `every event archived (${second.lines.join('\n')})`);

  const after = await archiveObjects(aws().s3, bucket);
  const archived = after.flatMap((o) => o.events.map((e) => e.id));
  // Each acknowledged event in exactly one object, none missed.
  expect([...archived].sort()).toEqual([...posted].sort());
  // Written again under the same key, from the bytes recorded before its PUT: a superset of what was there.
  const again = after.find((o) => o.key === key)!;
  expect(again.events.map((e) => e.id).slice(0, before[0]!.events.length)).toEqual(before[0]!.events.map((e) => e.id));

  second.child.kill('SIGTERM');
  expect(await second.exited).toBe(0);
}, 60_000);
