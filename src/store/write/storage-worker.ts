// The storage thread's entry: the SQLite write connection of the serving path (the deliveries' group
// commit, the readiness write, the delivery tally), so that the thread answering webhooks never
// waits on the disk.
import { parentPort, workerData } from 'node:worker_threads';
import { serveParts } from '../../threads/calls.js';
import { deferAutocheckpoint } from '../engines/checkpointer.js';
import { openDatabase } from '../engines/database.js';
import { beatQuery } from '../state/heartbeat.js';
import { addSinkMinutes } from '../state/stats.js';
import { createSqliteDeliveryWriter } from './sqlite-delivery-writer.js';
import type { FromStorage, StorageCalls, StorageData, ToStorage } from './storage-messages.js';

const port = parentPort;
if (!port) throw new Error('storage-worker.js runs as a worker thread of `boxrelay serve`');
const { file, synchronous, busyTimeoutMs } = workerData as StorageData;
const database = openDatabase({ url: file, sqliteSynchronous: synchronous, busyTimeoutMs });
if (database.dialect !== 'sqlite') throw new Error('the storage thread serves a SQLite file only');
deferAutocheckpoint(database.sqlite);
const writer = createSqliteDeliveryWriter(database);
const storage: StorageCalls = {
  record: (delivery) => writer.record(delivery),
  beat: async (now) => void (await beatQuery(database.kysely, now).execute()),
  addSinkMinutes: (counts) => addSinkMinutes(database, counts),
};
const served = serveParts(port, { storage });

port.on('message', (message: ToStorage) => {
  // The connection closes only once every call handed over has its answer.
  if (message.kind === 'close') void served.answered().then(() => database.close()).then(() => port.close());
});
port.postMessage({ kind: 'ready' } satisfies FromStorage);
