import { mkdirSync, readdirSync, rmSync } from 'node:fs';
import { basename, join } from 'node:path';
import type { Clock } from '../../clock.js';
import { errorCodeOf } from '../../errors.js';
import type { Logger } from '../../log.js';
import { scheduleRepeating, type Schedule, type Timers } from '../../schedule.js';
import { backupInThread } from './backup-thread.js';

/** The name of a scheduled backup: the UTC time it was begun, so names sort as times do. */
const BACKUP_NAME = /^boxrelay-(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z\.db$/;

/** The first backup after start waits this long (the start is not slowed), unless a recent one exists. */
const FIRST_DELAY_MS = 60_000;

/** `boxrelay-20261129T020000Z.db` for a backup begun at that moment. */
export function backupFileName(at: number): string {
  return `boxrelay-${new Date(at).toISOString().replace(/[-:]|\.\d{3}/g, '')}.db`;
}

/** The backups the relay wrote in `dir`, newest first; other files there are not its own. */
function writtenBackups(dir: string): { file: string; at: number }[] {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch (error) {
    // None yet; what is in the way is reported by the backup that cannot write there.
    if (errorCodeOf(error) === 'ENOENT' || errorCodeOf(error) === 'ENOTDIR') return [];
    throw error;
  }
  return names
    .flatMap((name) => {
      const [, year, month, day, hour, minute, second] = BACKUP_NAME.exec(name) ?? [];
      return year ? [{ file: join(dir, name), at: Date.parse(`${year}-${month}-${day}T${hour}:${minute}:${second}Z`) }] : [];
    })
    .sort((a, b) => b.at - a.at);
}

export interface BackupScheduleOptions {
  /** The SQLite file the relay serves. */
  database: string;
  dir: string;
  intervalMs: number;
  keep: number;
  clock: Clock;
  logger: Logger;
  timers?: Timers | undefined;
}

export interface Backups {
  /** Epoch ms of the newest backup written (also by an earlier run of the relay), or null. */
  lastSuccessAt(): number | null;
  start(): void;
  /** Cuts a backup in progress short (its partial copy removed) and plans no other. */
  stop(): Promise<void>;
}

/**
 * Contract section 22: a `boxrelay backup` into `dir` every interval while the relay serves, in a
 * thread of its own, keeping the newest `keep` the relay wrote. A failed one is logged and the next
 * is tried an interval later; the backups already kept stay.
 */
export function scheduleBackups({ database, dir, intervalMs, keep, clock, logger, timers }: BackupScheduleOptions): Backups {
  let lastSuccessAt = writtenBackups(dir)[0]?.at ?? null;
  let schedule: Schedule | undefined;

  const backUp = async (signal: AbortSignal): Promise<void> => {
    const begun = clock.now();
    const started = performance.now();
    mkdirSync(dir, { recursive: true });
    const result = await backupInThread(database, join(dir, backupFileName(begun)), signal).catch((error: unknown) => {
      if (signal.aborted) return undefined;
      throw error;
    });
    if (!result) return logger.info('backup cut short by the shutdown; its partial copy removed');
    lastSuccessAt = begun;
    const removed = writtenBackups(dir).slice(keep).map(({ file }) => file);
    for (const file of removed) rmSync(file, { force: true });
    logger.info({ ...result, durationMs: Math.round(performance.now() - started), removed: removed.map((file) => basename(file)) }, `backup written: ${result.file}`);
  };

  return {
    lastSuccessAt: () => lastSuccessAt,
    start() {
      // Across restarts the interval holds: a backup younger than it is not taken again at once.
      const due = lastSuccessAt === null ? 0 : lastSuccessAt + intervalMs - clock.now();
      schedule = scheduleRepeating(backUp, {
        timers,
        firstDelayMs: Math.min(intervalMs, Math.max(FIRST_DELAY_MS, due)),
        intervalMs,
        onError: (error) => logger.error({ err: error }, 'backup failed; the next is tried after BOXRELAY_BACKUP_INTERVAL'),
      });
    },
    async stop() {
      await schedule?.stop();
      schedule = undefined;
    },
  };
}
