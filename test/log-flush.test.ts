import { once } from 'node:events';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { sqliteFile } from './support/databases.js';
import { killIfRunning, logLines, requireBuild, spawnRelay, type RelayProcess } from './support/process.js';
import { SECRET, delivery } from './support/sign.js';

beforeAll(requireBuild);

let relay: RelayProcess | undefined;
afterEach(async () => {
  await killIfRunning(relay);
  relay = undefined;
});

describe('the log of serve (asynchronous writes to stdout)', () => {
  it('still has every line when SIGTERM ends the process: the delivery, the shutdown, and the last line before exit', async () => {
    relay = await spawnRelay({ BOXRELAY_SECRETS: SECRET, BOXRELAY_DATABASE: sqliteFile() });
    const d = delivery({ timestamp: Math.floor(Date.now() / 1000) });
    const answer = await fetch(`http://127.0.0.1:${relay.port}/webhooks`, { method: 'POST', headers: d.headers, body: d.body });
    expect(answer.status).toBe(200);

    // 'close' comes after stdout is read to its end, so every line written reached the pipe.
    const closed = once(relay.child, 'close');
    relay.child.kill('SIGTERM');
    await closed;
    expect(relay.child.exitCode).toBe(0);
    const entries = logLines(relay).map((line) => JSON.parse(line) as Record<string, unknown>);
    expect(entries.find((e) => e.msg === 'delivery')).toMatchObject({ deliveryId: d.id, outcome: 'accepted', level: 30 });
    expect(entries.map((e) => e.msg)).toEqual(expect.arrayContaining(['shutting down', 'boxrelay stopped']));
  });
});
