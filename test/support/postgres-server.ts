import { execFile } from 'node:child_process';
import { chownSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { freePort } from './nats.js';

const run = promisify(execFile);
const BIN = '/usr/lib/postgresql/15/bin';

export interface OwnPostgres {
  url: string;
  /** The server's data directory's parent (its socket is there too). */
  dir: string;
  /** The URL of another database on this server, made if missing. */
  database(name: string): Promise<string>;
  /** `pg_ctl start`, waiting until it accepts connections. */
  start(): Promise<void>;
  /** `pg_ctl stop -m fast`: clients get "terminating connection due to administrator command". */
  stop(): Promise<void>;
  /** SIGSTOP to the postmaster and its backends: connections stay open and nothing answers. */
  pause(): Promise<void>;
  resume(): Promise<void>;
  /** `pg_terminate_backend` of every other session on the database, from a client of its own. */
  terminateBackends(): Promise<number>;
  query<T extends pg.QueryResultRow>(text: string, params?: unknown[]): Promise<T[]>;
  /** Running and answering again, whatever a test left it in (for afterEach). */
  restore(): Promise<void>;
  /** Stops it for good. */
  close(): Promise<void>;
}

/** The PostgreSQL tools refuse to run as root: as root, run them as the `postgres` user. */
function asOwner(command: string, args: string[]): Promise<unknown> {
  const root = process.getuid?.() === 0;
  return root ? run('runuser', ['-u', 'postgres', '--', join(BIN, command), ...args]) : run(join(BIN, command), args);
}

/** The same tools as the server's owner (for pg_dump and pg_restore beside it). */
export const postgresTool = asOwner;

/**
 * A PostgreSQL of the test's own (temp dir, free port, trust auth), for tests that stop or freeze
 * it; `settings` are server settings (`-c name=value`).
 */
export async function ownPostgres(settings: Record<string, string> = {}): Promise<OwnPostgres> {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'boxrelay-pg-'));
  const data = join(dir, 'data');
  if (process.getuid?.() === 0) {
    const { stdout } = await run('id', ['-u', 'postgres']);
    const { stdout: gid } = await run('id', ['-g', 'postgres']);
    chownSync(dir, Number(stdout), Number(gid));
  }
  await asOwner('initdb', ['-D', data, '-A', 'trust', '-U', 'postgres', '--no-sync']);
  const extra = Object.entries(settings).map(([name, value]) => ` -c ${name}=${value}`).join('');
  const options = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=50${extra}`;
  const url = `postgres://postgres@127.0.0.1:${port}/postgres`;
  const postmasterPid = () => Number(readFileSync(join(data, 'postmaster.pid'), 'utf8').split('\n')[0]);
  const signalAll = async (signal: 'SIGSTOP' | 'SIGCONT') => {
    const pid = postmasterPid();
    const { stdout } = await run('pgrep', ['-P', String(pid)]);
    // The postmaster first on stop (it accepts no one), last on resume.
    const pids = [pid, ...stdout.split('\n').filter(Boolean).map(Number)];
    for (const p of signal === 'SIGSTOP' ? pids : pids.reverse()) process.kill(p, signal);
  };
  let state: 'running' | 'stopped' | 'paused' = 'stopped';
  const own: OwnPostgres = {
    url,
    dir,
    async database(name) {
      const [exists] = await own.query('SELECT 1 FROM pg_database WHERE datname = $1', [name]);
      if (!exists) await own.query(`CREATE DATABASE ${name}`);
      return `postgres://postgres@127.0.0.1:${port}/${name}`;
    },
    async start() {
      await asOwner('pg_ctl', ['-D', data, '-o', options, '-l', join(dir, 'log'), '-w', 'start']);
      state = 'running';
    },
    async stop() {
      await asOwner('pg_ctl', ['-D', data, '-m', 'fast', '-w', 'stop']);
      state = 'stopped';
    },
    async pause() {
      await signalAll('SIGSTOP');
      state = 'paused';
    },
    async resume() {
      await signalAll('SIGCONT');
      state = 'running';
    },
    async restore() {
      if (state === 'paused') await own.resume();
      if (state === 'stopped') await own.start();
    },
    async terminateBackends() {
      const rows = await own.query<{ terminated: boolean }>(
        'SELECT pg_terminate_backend(pid) AS terminated FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND datname = current_database()',
      );
      return rows.filter((r) => r.terminated).length;
    },
    async query(text, params) {
      const client = new pg.Client(url);
      await client.connect();
      try {
        return (await client.query(text, params)).rows;
      } finally {
        await client.end();
      }
    },
    async close() {
      await own.restore();
      await own.stop();
    },
  };
  await own.start();
  return own;
}
