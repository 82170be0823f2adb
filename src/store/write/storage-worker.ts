// The storage thread's entry: the SQLite write connection of the serving path (the deliveries' group
// commit, the readiness write, the delivery tally), so that the thread answering webhooks never
// waits on the disk.
import { parentPort, workerData } from 'node:worker_threads';
import { serializeError } from '../../dispatch/thread-messages.js';
import { deferAutocheckpoint } from '../engines/checkpointer.js';
import { openDatabase } from '../engines/database.js';
import { beatQuery } from '../state/heartbeat.js';
import { addSinkMinutes } from '../state/stats.js';
import { createSqliteDeliveryWriter } from './sqlite-delivery-writer.js';
import type { FromStorage, Settled, StorageCalls, StorageData, ToStorage } from './storage-messages.js';

const port = parentPort;
if (!port) throw new Error('storage-worker.js runs as a worker thread of `boxrelay serve`');
const { file, synchronous, busyTimeoutMs } = workerData as StorageData;
const database = openDatabase({ url: file, sqliteSynchronous: synchronous, busyTimeoutMs });
if (database.dialect !== 'sqlite') throw new Error('the storage thread serves a SQLite file only');
deferAutocheckpoint(database.sqlite);
const writer = createSqliteDeliveryWriter(database);
const calls: StorageCalls = {
  beat: async (now) => void (await beatQuery(database.kysely, now).execute()),
  addSinkMinutes: (counts) => addSinkMinutes(database, counts),
};
const post = (message: FromStorage) => port.postMessage(message);

const settle = async <T>(work: () => Promise<T>): Promise<Settled<T>> => {
  try {
    return { value: await work() };
  } catch (error) {
    return { error: serializeError(error) };
  }
};

/** Work taken and not answered yet: the connection closes only once each has its answer. */
const underWay = new Set<Promise<void>>();
const track = (work: Promise<void>) => {
  underWay.add(work);
  void work.finally(() => underWay.delete(work));
};

port.on('message', (message: ToStorage) => {
  switch (message.kind) {
    case 'record':
      return track(
        Promise.all(message.deliveries.map((delivery) => settle(() => writer.record(delivery)))).then((results) =>
          post({ kind: 'recorded', id: message.id, results }),
        ),
      );
    case 'call': {
      const method = calls[message.method] as (...args: unknown[]) => Promise<void>;
      return track(settle(() => method(...message.args)).then((result) => post({ kind: 'answered', id: message.id, result })));
    }
    case 'close':
      return void Promise.all(underWay)
        .then(() => database.close())
        .then(() => port.close());
  }
});
post({ kind: 'ready' });
