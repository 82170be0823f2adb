// The storage thread's entry: the one write connection of a SQLite file the relay serves. It commits
// the deliveries and every write of the other threads' connections (which only read), so the thread
// answering webhooks never waits on the disk and no other thread ever holds the file's write lock.
import { once } from 'node:events';
import { parentPort, workerData, type MessagePort } from 'node:worker_threads';
import { serveParts, type Served } from '../../threads/calls.js';
import { serializeError } from '../../threads/errors.js';
import { deferAutocheckpoint } from '../engines/checkpointer.js';
import { openDatabase } from '../engines/database.js';
import { createSqliteWriter } from './sqlite-writer.js';
import { unpackDeliveries } from './packed-deliveries.js';
import type { DeliveryTurns, FromStorage, Recorded, StorageData, StorageLinks, ToStorage } from './storage-messages.js';
import { WRITER_TRANSACTIONS } from './writer-transactions.js';

const port = parentPort;
if (!port) throw new Error('storage-worker.js runs as a worker thread of `boxrelay serve`');
const { file, synchronous, busyTimeoutMs } = workerData as StorageData;
const database = openDatabase({ url: file, sqliteSynchronous: synchronous, busyTimeoutMs });
if (database.dialect !== 'sqlite') throw new Error('the storage thread serves a SQLite file only');
deferAutocheckpoint(database.sqlite);
const storage = createSqliteWriter(database, { transactions: WRITER_TRANSACTIONS });

/** Each port's calls (the main thread's, each linked thread's): the connection closes only once each has its answer. */
const served = new Set<Served>();
/** Each linked port, until the main thread has heard it drained. */
const drained = new Map<number, Promise<void>>();
/** Linked ports still open (their thread alive): closed with the connection, as they would keep this thread running. */
const open = new Set<MessagePort>();
const links: StorageLinks = {
  async drained(id) {
    await drained.get(id);
    drained.delete(id);
  },
};
// A turn's deliveries are handed to the writer together, so they are in one commit (its turn) and
// are answered together: the one answer waits for none of them longer than its own commit.
const deliveries: DeliveryTurns = {
  record: (packed) =>
    Promise.all(
      unpackDeliveries(packed).map((delivery) =>
        storage.record(delivery).then(
          (result): Recorded => result,
          (error: unknown): Recorded => ({ error: serializeError(error) }),
        ),
      ),
    ),
};
served.add(serveParts(port, { storage, deliveries, links }));

port.on('message', (message: ToStorage) => {
  switch (message.kind) {
    case 'link': {
      const linked = serveParts(message.port, { storage });
      served.add(linked);
      open.add(message.port);
      // The port's close comes after every message its other end posted.
      const closed = once(message.port, 'close').then(() => linked.answered());
      drained.set(
        message.id,
        closed.then(() => {
          open.delete(message.port);
          served.delete(linked);
        }),
      );
      return;
    }
    case 'close':
      return void Promise.all([...served].map((calls) => calls.answered()))
        .then(() => database.close())
        .then(() => {
          for (const linked of open) linked.close();
          port.close();
        });
  }
});
port.postMessage({ kind: 'ready' } satisfies FromStorage);
