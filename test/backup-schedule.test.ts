// Scheduled backups (contract section 22): the relay itself writes a `boxrelay backup` into
// BOXRELAY_BACKUP_DIR every BOXRELAY_BACKUP_INTERVAL while it serves, keeps the newest
// BOXRELAY_BACKUP_KEEP it wrote, and shows the newest in a metric. The relay is the built one (dist/),
// as `serve` runs it, since the copy runs in a worker thread of its compiled module; its schedule
// runs on timers the test fires and a clock it moves.
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import BetterSqlite3 from 'better-sqlite3';
import { Registry } from 'prom-client';
import request from 'supertest';
import { beforeAll, describe, expect, it } from 'vitest';
import { configSchema } from '../src/config/schema.js';
import { backupFileName } from '../src/store/copy/backup-schedule.js';
import { ManualClock } from './support/clock.js';
import { POSTGRES_URL, sqliteFile } from './support/databases.js';
import { captureLogs, type CapturedLogs } from './support/log-capture.js';
import { requireBuild, runCli } from './support/process.js';
import { SECRET, delivery, sendRaw, type Delivery } from './support/sign.js';
import { preloaded } from './support/stored-deliveries.js';
import { threadsOf } from './support/threads.js';
import { HandTimers } from './support/timers.js';

beforeAll(requireBuild);

const DIST = join(import.meta.dirname, '..', 'dist', 'src');
const built = async <M>(path: string): Promise<M> => (await import(join(DIST, path))) as M;

const HOUR_MS = 3_600_000;

interface Started {
  relay: Awaited<ReturnType<typeof import('../src/main.js').createRelay>>;
  timers: HandTimers;
  logs: CapturedLogs;
  post(d: Delivery): Promise<Record<string, unknown>>;
  metric(): Promise<number | undefined>;
}

/** A started relay on `database` writing backups into `dir` every hour, on the test's timers and clock. */
async function startRelay(clock: ManualClock, database: string, dir: string, keep = 2): Promise<Started> {
  const { createRelay } = await built<typeof import('../src/main.js')>('main.js');
  const config = configSchema.parse({
    fanoutThread: 'inline',
    secrets: [SECRET],
    database,
    backupDir: dir,
    backupInterval: '1h',
    backupKeep: keep,
    port: 0,
    internalPort: 0,
    host: '127.0.0.1',
    internalHost: '127.0.0.1',
  });
  const timers = new HandTimers();
  const logs = captureLogs();
  const relay = await createRelay({ config, logger: logs.logger, clock, registry: new Registry(), timers: new HandTimers(), backup: { timers } });
  await relay.start();
  return {
    relay,
    timers,
    logs,
    async post(d) {
      const response = await sendRaw(request(relay.publicApp).post('/webhooks').set(d.headers), d.body);
      expect(response.status).toBe(200);
      return response.body as Record<string, unknown>;
    },
    async metric() {
      const text = (await request(relay.internalApp).get('/metrics')).text;
      const line = /^boxrelay_backup_last_success_timestamp_seconds (\S+)$/m.exec(text);
      return line ? Number(line[1]) : undefined;
    },
  };
}

/** The ids of the deliveries a backup file holds, read as any SQLite client would. */
function storedIds(file: string): string[] {
  const copy = new BetterSqlite3(file, { readonly: true });
  try {
    return (copy.prepare('SELECT id FROM deliveries ORDER BY id').all() as { id: string }[]).map((row) => row.id);
  } finally {
    copy.close();
  }
}

/** This process's threads with their niceness, by name; none while one ends as they are read. */
function threads(): Map<string, number> {
  try {
    return new Map([...threadsOf(process.pid).values()].map(({ name, niceness }) => [name, niceness]));
  } catch {
    return new Map();
  }
}

const backupDir = () => join(mkdtempSync(join(tmpdir(), 'boxrelay-backups-')), 'backups');

/** A started relay on a file of 12,000 stored deliveries (24 MB), so that a backup takes many steps. */
async function busyRelay(): Promise<Started & { clock: ManualClock; dir: string }> {
  const clock = new ManualClock();
  const dir = backupDir();
  const database = sqliteFile();
  await preloaded(database, 12_000);
  return { ...(await startRelay(clock, database, dir)), clock, dir };
}

describe('scheduled backups (BOXRELAY_BACKUP_DIR)', () => {
  it('writes restorable backups on the interval, keeps the newest KEEP it wrote and no other file, and sets the metric', async () => {
    const clock = new ManualClock();
    const dir = backupDir();
    mkdirSync(dir);
    // Files the relay did not write: never removed.
    writeFileSync(join(dir, 'notes.txt'), 'keep me');
    writeFileSync(join(dir, 'boxrelay-before-upgrade.db'), 'a backup made by hand');
    const { relay, timers, post, metric } = await startRelay(clock, sqliteFile(), dir);
    const sent: Delivery[] = [];
    try {
      expect(await metric()).toBe(0);
      // The first shortly after start.
      expect(timers.planned.map((p) => p.ms)).toEqual([60_000]);
      const names: string[] = [];
      for (let i = 0; i < 3; i++) {
        const d = delivery({ timestamp: clock.seconds, boxId: `bx_${i}` });
        await post(d);
        sent.push(d);
        clock.advance(i === 0 ? 60_000 : HOUR_MS);
        await timers.fire();
        expect(timers.planned.map((p) => p.ms)).toEqual([HOUR_MS]);
        expect(await metric()).toBe(clock.seconds);
        names.push(backupFileName(clock.now()));
        // Each backup holds what was stored before it began.
        expect(storedIds(join(dir, names[i]!))).toEqual(sent.map((s) => s.id).sort());
      }
      expect(names[0]).toBe('boxrelay-20261121T100100Z.db');
      expect(readdirSync(dir).sort()).toEqual(['boxrelay-before-upgrade.db', ...names.slice(1), 'notes.txt'].sort());
    } finally {
      await relay.stop();
    }

    // Restoring is putting the file back at BOXRELAY_DATABASE: the restored relay knows every delivery in it.
    const restored = sqliteFile();
    copyFileSync(join(dir, readdirSync(dir).filter((name) => /^boxrelay-\d/.test(name)).sort().at(-1)!), restored);
    const again = await startRelay(clock, restored, backupDir());
    try {
      for (const { id } of sent) expect(await again.post(delivery({ id, timestamp: clock.seconds }))).toMatchObject({ duplicate: true });
      expect(await again.post(delivery({ timestamp: clock.seconds }))).toMatchObject({ duplicate: false });
    } finally {
      await again.relay.stop();
    }
  });

  it('logs a failed backup without a secret, keeps the schedule, and writes the next once it can', async () => {
    const clock = new ManualClock();
    const parent = mkdtempSync(join(tmpdir(), 'boxrelay-backups-'));
    // A file where the directory should be: no backup can be written under it.
    writeFileSync(join(parent, 'backups'), '');
    const dir = join(parent, 'backups');
    const { relay, timers, logs, post, metric } = await startRelay(clock, sqliteFile(), dir);
    try {
      await post(delivery({ timestamp: clock.seconds }));
      await timers.fire();
      expect(logs.entries().find((e) => e.level === 50)).toMatchObject({ part: 'backup', msg: 'backup failed; the next is tried after BOXRELAY_BACKUP_INTERVAL' });
      expect(logs.text()).not.toContain(SECRET);
      expect(timers.planned.map((p) => p.ms)).toEqual([HOUR_MS]);
      expect(await metric()).toBe(0);
      // The receiver never noticed.
      await post(delivery({ timestamp: clock.seconds }));

      rmSync(join(parent, 'backups'));
      clock.advance(HOUR_MS);
      await timers.fire();
      expect(readdirSync(dir)).toHaveLength(1);
      expect(await metric()).toBe(clock.seconds);
    } finally {
      await relay.stop();
    }
  });

  it('after a restart, keeps the interval from the newest backup it wrote and shows that one in the metric', async () => {
    const clock = new ManualClock();
    const dir = backupDir();
    const database = sqliteFile();
    const first = await startRelay(clock, database, dir);
    await first.timers.fire();
    await first.relay.stop();

    clock.advance(20 * 60_000);
    const second = await startRelay(clock, database, dir);
    try {
      expect(await second.metric()).toBe(clock.seconds - 20 * 60);
      expect(second.timers.planned.map((p) => p.ms)).toEqual([40 * 60_000]);
    } finally {
      await second.relay.stop();
    }
  });

  it('answers deliveries while a backup runs: the copy and its check are in a thread of their own', async () => {
    const { clock, dir, relay, timers, post } = await busyRelay();
    try {
      let backingUp = true;
      const backup = timers.fire().finally(() => (backingUp = false));
      let answeredDuring = 0;
      let niceness: number | undefined;
      while (backingUp) {
        await post(delivery({ timestamp: clock.seconds }));
        // Its highest: the thread starts at the process's niceness, then raises its own.
        niceness = Math.max(niceness ?? -20, threads().get('backup') ?? -20);
        if (backingUp) answeredDuring++;
      }
      await backup;
      expect(answeredDuring).toBeGreaterThan(0);
      // A thread of its own for this backup only, nicer than the one that answers webhooks.
      expect(niceness).toBe(Math.min(19, threadsOf(process.pid).get(process.pid)!.niceness + 10));
      expect(threads().has('backup')).toBe(false);
      const [written] = readdirSync(dir);
      expect(storedIds(join(dir, written!)).length).toBeGreaterThanOrEqual(12_000);
    } finally {
      await relay.stop();
    }
  });

  it('a stop cuts a backup in progress short, leaving no partial copy', async () => {
    const { dir, relay, timers, logs } = await busyRelay();
    const backup = timers.fire();
    await relay.stop();
    await backup;
    expect(logs.entries().filter((e) => e.part === 'backup').map((e) => e.msg)).toEqual(['backup cut short by the shutdown; its partial copy removed']);
    expect(readdirSync(dir)).toEqual([]);
    expect(timers.planned).toEqual([]);
  });

  it('is refused with PostgreSQL: exit 2, one line', async () => {
    const result = await runCli(['serve'], { BOXRELAY_DATABASE: POSTGRES_URL, BOXRELAY_SECRETS: SECRET, BOXRELAY_BACKUP_DIR: backupDir() });
    expect(result).toEqual({
      code: 2,
      stdout: '',
      stderr:
        'boxrelay: invalid configuration: BOXRELAY_BACKUP_DIR: scheduled backups copy a SQLite database and BOXRELAY_DATABASE names PostgreSQL: unset it and back up with pg_dump\n',
    });
  });
});
