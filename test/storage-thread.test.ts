// The deliveries' group commit in the storage thread (`serve` on a SQLite file, the fan-out in its
// worker), through the built CLI as users run it: every 200 is a commit another connection sees,
// a write lock held elsewhere stalls only that thread (the receive thread keeps answering) and ends
// in 503s, and a SIGTERM answers what was handed over before the connection closes.
import { once } from 'node:events';
import { readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { request, type IncomingMessage } from 'node:http';
import BetterSqlite3 from 'better-sqlite3';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { sqliteFile } from './support/databases.js';
import { killIfRunning, requireBuild, spawnRelay, type RelayProcess } from './support/process.js';
import { SECRET, delivery } from './support/sign.js';
import { startStorageThread, type StorageThread } from '../src/store/write/storage-thread.js';
import type { NewDelivery } from '../src/store/write/delivery-sql.js';
import { packDeliveries, unpackDeliveries } from '../src/store/write/packed-deliveries.js';

beforeAll(requireBuild);

let relays: RelayProcess[] = [];
afterEach(async () => {
  for (const relay of relays) await killIfRunning(relay);
  relays = [];
});

async function serve(file: string, env: Record<string, string> = {}): Promise<RelayProcess> {
  const relay = await spawnRelay({ BOXRELAY_SECRETS: SECRET, BOXRELAY_DATABASE: file, BOXRELAY_FANOUT_THREAD: 'worker', ...env });
  relays.push(relay);
  return relay;
}

async function post(relay: RelayProcess, id?: string): Promise<{ status: number; body: { id?: string; duplicate?: boolean; code?: string } }> {
  const d = delivery({ id, timestamp: Math.floor(Date.now() / 1000) });
  const response = await fetch(`http://127.0.0.1:${relay.port}/webhooks`, { method: 'POST', headers: d.headers, body: d.body });
  return { status: response.status, body: (await response.json()) as { id?: string; duplicate?: boolean } };
}

/** Another connection, as another process would read the file. */
function reader(file: string) {
  const sqlite = new BetterSqlite3(file, { readonly: true });
  const stored = sqlite.prepare<[string], { id: string }>('SELECT id FROM deliveries WHERE id = ?');
  return { has: (id: string) => stored.get(id) !== undefined, close: () => sqlite.close() };
}

/** Holds the file's write lock, as a long transaction of another connection would. */
function holdWriteLock(file: string) {
  const sqlite = new BetterSqlite3(file);
  sqlite.exec('BEGIN IMMEDIATE');
  return () => {
    sqlite.exec('ROLLBACK');
    sqlite.close();
  };
}

function newDelivery(id: string, extra: Partial<NewDelivery> = {}): NewDelivery {
  const createdAt = '2026-11-26T10:00:00.000Z';
  return {
    event: { id, type: 'box.state_changed', createdAt, createdAtIso: createdAt, boxId: 'box_1', boxName: null, state: 'running', previousState: 'starting', payload: `{"id":"${id}"}` },
    receivedAt: 1_764_151_200_123,
    attempt: null,
    sinks: ['nats'],
    ...extra,
  };
}

/**
 * A stand-in for the thread's module that speaks its protocol: it writes down each message it gets
 * (as unpacked by the built relay) in the file named by its `file`, answers each delivery by its id
 * (`evt_dup` a duplicate, `evt_full` a full disk, others new), and exits when told to close.
 */
function scriptedThread(onCommit: () => void = () => {}): { thread: StorageThread; messages(): { part: string; method: string; transferred: boolean; deliveries: NewDelivery[] }[] } {
  const script = join(tmpdir(), `storage-scripted-${process.pid}.mjs`);
  const unpack = new URL('../dist/src/store/write/packed-deliveries.js', import.meta.url);
  writeFileSync(script, `import { appendFileSync } from 'node:fs';
    import { parentPort, workerData } from 'node:worker_threads';
    import { unpackDeliveries } from '${unpack.href}';
    const full = { message: 'storage unavailable', name: 'StorageUnavailableError', code: 'storage_unavailable', cause: { message: 'database or disk is full', name: 'SqliteError', code: 'SQLITE_FULL' } };
    const outcome = ({ event }) => event.id === 'evt_full' ? { error: full } : { duplicate: event.id === 'evt_dup', payloadDiffers: false };
    parentPort.postMessage({ kind: 'ready' });
    parentPort.on('message', (message) => {
      if (message.kind === 'close') process.exit(0);
      if (message.kind !== 'call') return;
      const [packed] = message.args;
      const deliveries = unpackDeliveries(packed);
      appendFileSync(workerData.file, JSON.stringify({ part: message.part, method: message.method, transferred: packed instanceof Uint8Array, deliveries }) + '\\n');
      parentPort.postMessage({ kind: 'answer', id: message.id, value: deliveries.map(outcome) });
    });`);
  const file = sqliteFile();
  writeFileSync(file, '');
  const thread = startStorageThread({ file, synchronous: 'FULL', busyTimeoutMs: 1000 }, { onCommit, onLost: () => {}, script: pathToFileURL(script) });
  const messages = () =>
    readFileSync(file, 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((line) => JSON.parse(line) as ReturnType<ReturnType<typeof scriptedThread>['messages']>[number]);
  return { thread, messages };
}

describe('the deliveries handed to the storage thread', () => {
  it('cross as one message a turn, one transferred buffer, and each caller gets its own outcome from the one answer', async () => {
    let commits = 0;
    const { thread, messages } = scriptedThread(() => commits++);
    await thread.started;
    const handed = [newDelivery('evt_new'), newDelivery('evt_dup'), newDelivery('evt_full')];
    const [stored, duplicate, full] = await Promise.allSettled(handed.map((delivery) => thread.record(delivery)));
    expect(stored).toEqual({ status: 'fulfilled', value: { duplicate: false, payloadDiffers: false } });
    expect(duplicate).toEqual({ status: 'fulfilled', value: { duplicate: true, payloadDiffers: false } });
    // Its own error, with the cause that crossed (the disk full), as the receiver's 503.
    expect(full).toMatchObject({ status: 'rejected', reason: { code: 'storage_unavailable', cause: { code: 'storage_unavailable', cause: { code: 'SQLITE_FULL' } } } });
    expect(commits).toBe(1);
    expect(messages()).toEqual([{ part: 'deliveries', method: 'record', transferred: true, deliveries: handed }]);
    // The next turn's deliveries are the next message.
    await thread.record(newDelivery('evt_later'));
    expect(messages().map((message) => message.deliveries.map((delivery) => delivery.event.id))).toEqual([['evt_new', 'evt_dup', 'evt_full'], ['evt_later']]);
    await thread.close();
  });

  it('handed over in the turn close() is called in are sent first, and answered before the thread ends', async () => {
    const { thread, messages } = scriptedThread();
    await thread.started;
    const records = [thread.record(newDelivery('evt_a')), thread.record(newDelivery('evt_b'))];
    await thread.close();
    await expect(Promise.all(records)).resolves.toEqual([
      { duplicate: false, payloadDiffers: false },
      { duplicate: false, payloadDiffers: false },
    ]);
    expect(messages()).toHaveLength(1);
  });

  it('are packed with every field: UTF-8 beyond ASCII, nulls, an origin, a trace, no sinks or several', () => {
    const deliveries = [
      newDelivery('evt_ü', { event: { ...newDelivery('x').event, id: 'evt_ü', boxName: 'Küche 🚀', payload: '{"name":"Küche 🚀","q":"\\"","n":null}' } }),
      newDelivery('evt_2', { event: { ...newDelivery('x').event, id: 'evt_2', boxId: null, state: null, previousState: null }, attempt: 3, sinks: [], origin: 'history', traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' }),
      newDelivery('evt_3', { sinks: ['nats', 'hook:a', 'hook:b'] }),
    ];
    expect(unpackDeliveries(packDeliveries(deliveries))).toEqual(deliveries);
    expect(unpackDeliveries(packDeliveries([]))).toEqual([]);
  });
});

describe('the storage thread', () => {
  it('answers each delivery after its commit: another connection sees every 200 as it arrives, a repeat is a duplicate', async () => {
    const file = sqliteFile();
    const relay = await serve(file);
    const read = reader(file);
    try {
      const seenAtAnswer = await Promise.all(
        Array.from({ length: 200 }, async () => {
          const answer = await post(relay);
          return answer.status === 200 && read.has(answer.body.id as string);
        }),
      );
      expect(seenAtAnswer.filter((seen) => !seen)).toHaveLength(0);
      const first = await post(relay);
      expect(await post(relay, first.body.id)).toEqual({ status: 200, body: { ok: true, id: first.body.id, duplicate: true } });
    } finally {
      read.close();
    }
  });

  it('a write lock held elsewhere stalls the commit, not the receive thread: /healthz answers meanwhile; the delivery gets 503, then 200 once released', async () => {
    const file = sqliteFile();
    const relay = await serve(file, { BOXRELAY_BUSY_TIMEOUT_MS: '2000' });
    const release = holdWriteLock(file);
    let waiting: Promise<Awaited<ReturnType<typeof post>>>;
    let answeredMeanwhile = 0;
    try {
      let done = false;
      waiting = post(relay).finally(() => (done = true));
      // On the receive thread, SQLite's busy handler would hold every request until the timeout.
      while (!done) {
        const health = await fetch(`http://127.0.0.1:${relay.port}/healthz`);
        if (health.status === 200 && !done) answeredMeanwhile++;
      }
      expect(await waiting).toMatchObject({ status: 503, body: { code: 'storage_unavailable' } });
      // The cause crossed from the storage thread: the driver's code, for the operator.
      expect(await relay.waitForLog((entry) => entry.msg === 'storage failure')).toMatchObject({ reason: expect.stringContaining('SQLITE_BUSY') });
    } finally {
      release();
    }
    expect(answeredMeanwhile).toBeGreaterThan(3);
    const again = await post(relay);
    expect(again).toMatchObject({ status: 200, body: { duplicate: false } });
  });

  it('a SIGTERM while a commit waits: the delivery is committed and answered 200 before the connection closes', async () => {
    const file = sqliteFile();
    const relay = await serve(file);
    const release = holdWriteLock(file);
    const d = delivery({ timestamp: Math.floor(Date.now() / 1000) });
    const req = request({ host: '127.0.0.1', port: relay.port, path: '/webhooks', method: 'POST', headers: { ...d.headers, Expect: '100-continue' } });
    const answered = once(req, 'response').then(([res]) => (res as IncomingMessage).statusCode);
    try {
      req.flushHeaders();
      // The relay has the request once it asks for the body.
      await once(req, 'continue');
      req.end(d.body);
      relay.child.kill('SIGTERM');
      await relay.waitForLog((entry) => entry.msg === 'shutting down');
    } finally {
      release();
    }
    expect(await answered).toBe(200);
    expect(await relay.exited).toBe(0);
    const read = reader(file);
    try {
      expect(read.has(d.id)).toBe(true);
    } finally {
      read.close();
    }
  });

  it('one that ends by itself (a crash) refuses what it was handed and everything after, and is reported lost once', async () => {
    // A stand-in for the thread's module that starts, then dies at the first delivery handed to it.
    const script = join(tmpdir(), `storage-crash-${process.pid}.mjs`);
    writeFileSync(script, `import { parentPort } from 'node:worker_threads';
      parentPort.postMessage({ kind: 'ready' });
      parentPort.once('message', () => process.exit(3));`);
    const lost: Error[] = [];
    const thread = startStorageThread(
      { file: sqliteFile(), synchronous: 'FULL', busyTimeoutMs: 1000 },
      { onCommit: () => {}, onLost: (error) => lost.push(error), script: pathToFileURL(script) },
    );
    await thread.started;
    const handed = newDelivery('evt_crash');
    // Every delivery of the turn it died in is refused, each with its own 503.
    const turn = await Promise.allSettled([thread.record(handed), thread.record(newDelivery('evt_crash_2'))]);
    expect(turn).toMatchObject([
      { status: 'rejected', reason: { code: 'storage_unavailable' } },
      { status: 'rejected', reason: { code: 'storage_unavailable' } },
    ]);
    expect(lost.map((error) => (error as { code?: string }).code)).toEqual(['storage_unavailable']);
    await expect(thread.record(handed)).rejects.toMatchObject({ code: 'storage_unavailable' });
    await thread.close();
    expect(lost).toHaveLength(1);
  });
});
