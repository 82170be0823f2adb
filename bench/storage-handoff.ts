import { randomUUID } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { openMigrated as OpenMigrated } from '../src/store/engines/migrate.js';
import type { NewDelivery } from '../src/store/write/delivery-sql.js';
import type { startStorageThread as StartStorageThread } from '../src/store/write/storage-thread.js';

/**
 * `node dist/bench/storage-handoff.js <built checkout> [per turn] [turns]`: the CPU a delivery costs
 * handed to the storage thread of that build (bench/build-rev.sh), in turns of `per turn` deliveries
 * as a loaded receive thread hands them over: the main thread's (the receive thread's share) and the
 * whole process's (the commit included), less the making of the deliveries. Run it for each build in
 * turn: the figures are this process's own, far steadier than a load run's on a shared machine.
 */
const [checkout = '.', perTurnArg = '12', turnsArg = '2000'] = process.argv.slice(2);
const perTurn = Number(perTurnArg);
const turns = Number(turnsArg);
const built = (path: string) => pathToFileURL(join(resolve(checkout), 'dist/src', path)).href;
const { openMigrated } = (await import(built('store/engines/migrate.js'))) as { openMigrated: typeof OpenMigrated };
const { startStorageThread } = (await import(built('store/write/storage-thread.js'))) as { startStorageThread: typeof StartStorageThread };

const file = join(mkdtempSync(join(tmpdir(), 'boxrelay-handoff-')), 'relay.db');
await (await openMigrated({ url: file, sqliteSynchronous: 'FULL' })).database.close();
const thread = startStorageThread({ file, synchronous: 'FULL', busyTimeoutMs: 5000 }, { onCommit() {}, onLost() {} });
await thread.started;

const note = 'x'.repeat(800);
function delivery(): NewDelivery {
  const id = `evt_${randomUUID()}`;
  const createdAt = new Date().toISOString();
  const boxId = `box_${Math.floor(Math.random() * 1000)}`;
  const payload = JSON.stringify({ id, type: 'box.state_changed', created_at: createdAt, data: { box_id: boxId, state: 'running', previous_state: 'starting', note } });
  return {
    event: { id, type: 'box.state_changed', createdAt, createdAtIso: createdAt, boxId, boxName: 'a box', state: 'running', previousState: 'starting', payload },
    receivedAt: Date.now(),
    attempt: 1,
    sinks: ['nats'],
  };
}
async function handOver(count: number): Promise<void> {
  for (let turn = 0; turn < count; turn++) await Promise.all(Array.from({ length: perTurn }, () => thread.record(delivery())));
}

await handOver(Math.ceil(2000 / perTurn));
const deliveries = perTurn * turns;
const makingStarted = process.threadCpuUsage();
for (let i = 0; i < deliveries; i++) delivery();
const making = process.threadCpuUsage(makingStarted);
const [mainStarted, processStarted] = [process.threadCpuUsage(), process.cpuUsage()];
await handOver(turns);
const perDelivery = ({ user, system }: NodeJS.CpuUsage) => (user + system - making.user - making.system) / deliveries;
const figures = { checkout, perTurn, mainThreadMicros: perDelivery(process.threadCpuUsage(mainStarted)), processMicros: perDelivery(process.cpuUsage(processStarted)) };
console.log(JSON.stringify(figures, (_key, value: unknown) => (typeof value === 'number' ? Math.round(value * 10) / 10 : value)));
await thread.close();
